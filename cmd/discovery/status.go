package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/status"
)

// statusReporter reports on the Istio resources themselves: proxies' NACKs
// (the xDS server observes ACKs and NACKs; the Reporter writes conditions
// and Events on the leader) and what discovery ignores of each resource
// (the Auditor judges every config on every replica, logs and counts it,
// and on the leader keeps a condition in step, and the status of Gateway
// API objects, through the KubeWriter's SetGatewayStatus). Without a
// cluster both only log.
func statusReporter(opts status.Options, cfg *rest.Config, client kubernetes.Interface, p *parts, store *model.Store, log *slog.Logger, reg prometheus.Registerer) error {
	var kw *status.KubeWriter
	if cfg != nil && client != nil {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		kw = status.NewKubeWriter(dyn, client)
	}
	log = log.With("component", "status")
	var w status.Writer
	var cw status.ConditionSetter
	if kw != nil {
		w, cw = kw, kw
	}
	r, err := status.New(opts, w, log, reg)
	if err != nil {
		return err
	}
	p.xds.SetObserver(r)
	p.runner.Add("status reporter", true, r.Start)
	a, err := status.NewAuditor(opts, store.World, cw, log, reg)
	if err != nil {
		return err
	}
	p.auditor = a
	store.Subscribe(a.Observe)
	// EnvoyFilter patches refused at generation time reach the
	// EnvoyFilter's status through the Auditor (the leader writes).
	a.SetPatchRefusals(p.xds.Generator())
	p.xds.Generator().OnEnvoyFilterRefused(a.NotePatchRefused)
	p.runner.Add("unsupported-field audit", false, a.Start)
	if cw != nil {
		p.runner.Add("unsupported-field status", true, a.Lead)
	}
	return nil
}
