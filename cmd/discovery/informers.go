package main

import (
	"context"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"

	"github.com/meshplane/discovery/pkg/config/kube"
)

// kubeClients are the config source's clients with the process's shared
// informer factory: the one place serve builds informers that several
// parts read across the cluster (kube.SharedKinds: Namespaces, read by
// the config source, the injector and the root-certificate publisher),
// so that the API server sees one LIST and one WATCH of each. The factory
// reads through the source's protobuf client with its resync period, and
// nothing but runSharedInformers starts it. Without a cluster: nil.
func (o *serveOptions) kubeClients(cfg *rest.Config) (*kube.Clients, error) {
	if cfg == nil {
		return nil, nil
	}
	c, err := kube.NewClients(cfg)
	if err != nil {
		return nil, err
	}
	c.Shared = informers.NewSharedInformerFactory(c.Kube, o.kube.ResyncPeriod)
	return &c, nil
}

// runSharedInformers runs every informer of f, whoever asked for it, for
// the life of the process (not the leader's term: the leader's parts
// come and go, the readers of every replica stay).
func runSharedInformers(f informers.SharedInformerFactory) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		f.Start(ctx.Done())
		<-ctx.Done()
		f.Shutdown()
		return nil
	}
}
