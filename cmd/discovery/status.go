package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshplane/discovery/pkg/status"
)

// statusReporter reports proxies' NACKs on the Istio resources they came
// from: the xDS server observes ACKs and NACKs; the Reporter writes
// conditions and Events on the leader (without a cluster it logs).
func statusReporter(opts status.Options, cfg *rest.Config, client kubernetes.Interface, p *parts, log *slog.Logger, reg prometheus.Registerer) error {
	var w status.Writer
	if cfg != nil && client != nil {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		w = status.NewKubeWriter(dyn, client)
	}
	r, err := status.New(opts, w, log.With("component", "status"), reg)
	if err != nil {
		return err
	}
	p.xds.SetObserver(r)
	p.runner.Add("status reporter", true, r.Start)
	return nil
}
