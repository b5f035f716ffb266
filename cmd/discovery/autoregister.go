package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/rest"

	"github.com/meshplane/discovery/pkg/autoregister"
	"github.com/meshplane/discovery/pkg/model"
)

// autoRegistration gives the xDS server the WorkloadEntry controller:
// every replica keeps the entries of its own proxies; the leader sweeps
// those left behind. Without a cluster the controller only reports that
// a proxy's request for auto-registration cannot be met.
func autoRegistration(opts autoregister.Options, cfg *rest.Config, p *parts, store *model.Store, log *slog.Logger, reg prometheus.Registerer) error {
	var client istioclient.Interface
	if cfg != nil {
		c, err := istioclient.NewForConfig(cfg)
		if err != nil {
			return err
		}
		client = c
	}
	ctl, err := autoregister.New(opts, store.World, client, log.With("component", "autoregistration"), reg)
	if err != nil {
		return err
	}
	p.xds.SetRegistrar(ctl)
	p.runner.Add("workloadentry auto-registration", false, ctl.Start)
	if client != nil {
		p.runner.Add("workloadentry sweep", true, ctl.Sweep)
	}
	return nil
}
