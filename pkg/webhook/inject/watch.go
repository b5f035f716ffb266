package inject

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Start watches the injection ConfigMap until ctx ends. Namespaces come
// from the lister SetNamespaceLister gave (the process's one Namespace
// informer), else from a GET at each injection: the injector never
// watches namespaces of its own. Each change of the ConfigMap
// is loaded as Load describes; deleting it keeps the configuration in
// force. When the service account may list and watch every
// MutatingWebhookConfiguration it also follows the revision tags
// (tags.go), as istiod does; otherwise pods labelled with a tag are
// skipped, which it logs. It returns nil when ctx ends.
func (i *Injector) Start(ctx context.Context) error {
	if i.client == nil {
		i.synced.Store(true)
		<-ctx.Done()
		return nil
	}
	name := i.opts.ConfigMapName()
	cmFactory := informers.NewSharedInformerFactoryWithOptions(i.client, 0,
		informers.WithNamespace(i.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	defer cmFactory.Shutdown()
	cmInformer := cmFactory.Core().V1().ConfigMaps().Informer()
	if _, err := cmInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { i.onConfigMap(obj) },
		UpdateFunc: func(_, obj any) { i.onConfigMap(obj) },
		DeleteFunc: func(any) {
			i.log.Warn("injection ConfigMap deleted; the config in force stays", "configmap", i.opts.Namespace+"/"+name)
		},
	}); err != nil {
		return fmt.Errorf("watch injection ConfigMap: %w", err)
	}
	syncs := []cache.InformerSynced{cmInformer.HasSynced}
	if s := i.namespacesSynced.Load(); s != nil {
		syncs = append(syncs, *s)
	}
	switch ok, err := CanWatchWebhooks(ctx, i.client); {
	case err != nil:
		i.log.Warn("revision tags off: cannot ask whether MutatingWebhookConfigurations may be watched; pods whose istio.io/rev names a tag are not injected", "err", err)
	case ok:
		tagsSynced, err := i.watchTags(ctx)
		if err != nil {
			return err
		}
		syncs = append(syncs, tagsSynced)
	default:
		i.log.Warn("revision tags off: this service account may not list and watch MutatingWebhookConfigurations; pods whose istio.io/rev names a tag are not injected")
	}
	cmFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		return nil // ctx ended first
	}
	i.synced.Store(true)
	if len(cmInformer.GetStore().List()) == 0 {
		i.log.Warn("injection ConfigMap not found; using the built-in config until it appears", "configmap", i.opts.Namespace+"/"+name)
	}
	<-ctx.Done()
	return nil
}

func (i *Injector) onConfigMap(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != i.opts.ConfigMapName() {
		return // the field selector should make this impossible; be sure
	}
	// Load logs and records a refused config; nothing more to do here.
	_ = i.Load(cm)
}
