package inject

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
)

// Informers are the injector's watches, built and run by the caller (the
// process builds its informers in one place).
type Informers struct {
	// ConfigMap is an informer of the injection ConfigMap alone: ConfigMaps
	// in Options.Namespace narrowed by ConfigMapListOptions. Required
	// with a client.
	ConfigMap cache.SharedIndexInformer
	// Tags is an informer of the revision tags' MutatingWebhookConfigurations
	// (TagListOptions), or nil when the service account may not list and
	// watch them (CanWatchWebhooks): pods labelled with a tag are then
	// skipped, which Start logs.
	Tags cache.SharedIndexInformer
}

// SetInformers gives the injector its watches. Call it before Start.
func (i *Injector) SetInformers(inf Informers) { i.informers.Store(&inf) }

// ConfigMapListOptions narrows the informer of Informers.ConfigMap to the
// injection ConfigMap, by name.
func (o Options) ConfigMapListOptions(lo *metav1.ListOptions) {
	lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.ConfigMapName()).String()
}

// Start follows the injection ConfigMap and the revision tags through the
// informers SetInformers gave until ctx ends. Namespaces come from the
// lister SetNamespaceLister gave (the process's one Namespace informer),
// else from a GET at each injection. Each change of the ConfigMap is
// loaded as Load describes; deleting it keeps the configuration in force.
// With Informers.Tags it follows the revision tags (tags.go), as istiod
// does; without, pods labelled with a tag are skipped, which it logs. It
// returns nil when ctx ends.
func (i *Injector) Start(ctx context.Context) error {
	if i.client == nil {
		i.synced.Store(true)
		<-ctx.Done()
		return nil
	}
	inf := i.informers.Load()
	if inf == nil || inf.ConfigMap == nil {
		return errors.New("injector: no ConfigMap informer (SetInformers)")
	}
	name := i.opts.ConfigMapName()
	cmReg, err := inf.ConfigMap.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { i.onConfigMap(obj) },
		UpdateFunc: func(_, obj any) { i.onConfigMap(obj) },
		DeleteFunc: func(any) {
			i.log.Warn("injection ConfigMap deleted; the config in force stays", "configmap", i.opts.Namespace+"/"+name)
		},
	})
	if err != nil {
		return fmt.Errorf("watch injection ConfigMap: %w", err)
	}
	defer func() { _ = inf.ConfigMap.RemoveEventHandler(cmReg) }()
	syncs := []cache.InformerSynced{cmReg.HasSynced}
	if s := i.namespacesSynced.Load(); s != nil {
		syncs = append(syncs, *s)
	}
	if inf.Tags != nil {
		tagsReg, err := i.followTags(inf.Tags)
		if err != nil {
			return err
		}
		defer func() { _ = inf.Tags.RemoveEventHandler(tagsReg) }()
		syncs = append(syncs, tagsReg.HasSynced)
	} else {
		i.log.Warn("revision tags off: this service account may not list and watch MutatingWebhookConfigurations; pods whose istio.io/rev names a tag are not injected")
	}
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		return nil // ctx ended first
	}
	i.synced.Store(true)
	if !hasObject(inf.ConfigMap, i.opts.Namespace, name) {
		i.log.Warn("injection ConfigMap not found; using the built-in config until it appears", "configmap", i.opts.Namespace+"/"+name)
	}
	<-ctx.Done()
	return nil
}

// hasObject reports whether inf holds namespace/name.
func hasObject(inf cache.SharedIndexInformer, namespace, name string) bool {
	_, ok, err := inf.GetStore().GetByKey(namespace + "/" + name)
	return err == nil && ok
}

func (i *Injector) onConfigMap(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != i.opts.ConfigMapName() {
		return // the field selector should make this impossible; be sure
	}
	// Load logs and records a refused config; nothing more to do here.
	_ = i.Load(cm)
}
