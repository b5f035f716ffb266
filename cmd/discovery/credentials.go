package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/meshplane/discovery/pkg/credentials"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/monitor"
)

// gatewayCredentials returns the reader of Gateway credentialName Secrets
// the xDS server serves over SDS when the service account may read Secrets
// in every namespace; otherwise nil, and it says why credentialName stays
// unsupported.
func gatewayCredentials(ctx context.Context, client kubernetes.Interface, log *slog.Logger, reg prometheus.Registerer) (*credentials.Kube, error) {
	ok, err := credentials.CanRead(ctx, client)
	if err != nil {
		return nil, err
	}
	if !ok {
		log.Warn("gateway credentials off: this service account may not list and watch Secrets in every namespace; Gateway servers with credentialName are left out")
		return nil, nil
	}
	k, err := credentials.NewKube(client, log.With("component", "credentials"), reg)
	if err != nil {
		return nil, err
	}
	log.Info("gateway credentials on: Gateway credentialName Secrets are served over SDS to gateways of their namespace")
	return k, nil
}

// runCredentials reads k's Secrets in p's runner, gates readiness on
// their first list and tells the model of their changes.
func runCredentials(k *credentials.Kube, p *parts, store *model.Store, mon *monitor.Server) {
	mon.AddReadyCheck("gateway credentials", func() error {
		if !k.HasSynced() {
			return errors.New("Secrets not read yet")
		}
		return nil
	})
	// The Gateway API's listener status says whether a certificateRef's
	// Secret exists and holds a valid certificate, read through this same
	// informer (no second watch of Secrets); until its first list,
	// certificateRefs are not judged by content.
	store.SetSecrets(k.CertificateState)
	k.OnChange(func(ns, name string) { store.SecretChanged(ns, name) })
	k.OnPresence(func(ns, name string) { store.SecretChanged(ns, name) })
	p.runner.Add("gateway credentials", false, func(ctx context.Context) error {
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), k.HasSynced) {
				store.SecretChanged("", "")
			}
		}()
		return k.Start(ctx)
	})
}
