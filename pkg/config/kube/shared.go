package kube

import (
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/meshplane/discovery/pkg/model"
)

// SharedKinds are the kinds the source reads through Clients.Shared when
// it is set: the core kinds other parts of the process also read across
// the cluster (the injector and the root-certificate publisher read
// Namespaces). Every other kind keeps an informer of the source's own.
var SharedKinds = []model.Kind{model.KindNamespace}

// sharedInformer is kind's informer in f, or nil when kind is not shared.
func sharedInformer(f informers.SharedInformerFactory, kind model.Kind) cache.SharedIndexInformer {
	switch kind {
	case model.KindNamespace:
		return f.Core().V1().Namespaces().Informer()
	}
	return nil
}

// prepareShared sets, on the shared informers of every kind of
// SharedKinds, what can only be set before they start: the source's
// transform and its watch-error handler. Every reader of the shared
// informers sees the stripped objects (no managedFields, no kubectl
// last-applied annotation).
func (s *Source) prepareShared() error {
	for _, kind := range SharedKinds {
		inf := sharedInformer(s.clients.Shared, kind)
		if err := inf.SetTransform(stripObject); err != nil {
			return fmt.Errorf("shared %s informer (started before the source was built?): %w", kind, err)
		}
		if err := inf.SetWatchErrorHandlerWithContext(watchErrorHandler(s.log.With("kind", string(kind)), s.metrics, string(kind))); err != nil {
			return fmt.Errorf("shared %s informer: %w", kind, err)
		}
	}
	return nil
}
