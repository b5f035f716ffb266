package main

import (
	"context"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/webhook/inject"
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

// injectorInformers builds the injector's watches, each an option set of
// its own (the injection ConfigMap by name; the revision tags' webhooks
// by label, when tags may be watched), hands them to the injector and
// returns what runs them for the life of the process.
func injectorInformers(injector *inject.Injector, client kubernetes.Interface, o inject.Options, tags bool) func(ctx context.Context) error {
	cmf := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(o.Namespace), informers.WithTweakListOptions(o.ConfigMapListOptions))
	inf := inject.Informers{ConfigMap: cmf.Core().V1().ConfigMaps().Informer()}
	factories := []informers.SharedInformerFactory{cmf}
	if tags {
		tf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(inject.TagListOptions))
		inf.Tags = tf.Admissionregistration().V1().MutatingWebhookConfigurations().Informer()
		factories = append(factories, tf)
	}
	injector.SetInformers(inf)
	return runSharedInformers(factories...)
}

// runSharedInformers runs every informer of fs, whoever asked for it, for
// the life of the process (not the leader's term: the leader's parts
// come and go, the readers of every replica stay).
func runSharedInformers(fs ...informers.SharedInformerFactory) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		for _, f := range fs {
			f.Start(ctx.Done())
		}
		<-ctx.Done()
		for _, f := range fs {
			f.Shutdown()
		}
		return nil
	}
}
