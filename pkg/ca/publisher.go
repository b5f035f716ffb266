package ca

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Root publication: the ConfigMap every workload namespace gets.
const (
	RootConfigMap    = "istio-ca-root-cert"
	RootConfigMapKey = "root-cert.pem"
)

var systemNamespaces = map[string]bool{"kube-system": true, "kube-public": true, "kube-node-lease": true}

// RootPublisher keeps the ConfigMap istio-ca-root-cert (key root-cert.pem)
// current in every namespace: created for new namespaces, rewritten when
// edited or when the root changes, recreated when deleted. Leader only.
type RootPublisher struct {
	client        kubernetes.Interface
	namespaces    cache.SharedIndexInformer
	authority     *Authority
	log           *slog.Logger
	publishSystem bool
}

// NewRootPublisher returns the publisher of this CA's root. Run it on the
// leader only; it needs the Kubernetes client (not in file mode).
// namespaces is the process's informer of every Namespace, run by the
// caller (the publisher only adds a handler to it), so that the API server
// sees one watch of namespaces however many parts read them.
func (c *CA) NewRootPublisher(namespaces cache.SharedIndexInformer) (*RootPublisher, error) {
	if c.client == nil {
		return nil, fmt.Errorf("root publisher needs a Kubernetes client")
	}
	if namespaces == nil {
		return nil, fmt.Errorf("root publisher needs the Namespace informer")
	}
	return &RootPublisher{
		client: c.client, namespaces: namespaces, authority: c.authority,
		log: c.log.With("controller", "root-publisher"), publishSystem: c.opts.PublishToSystemNamespaces,
	}, nil
}

// Start publishes until ctx ends.
func (p *RootPublisher) Start(ctx context.Context) error {
	cmFactory := informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", RootConfigMap).String()
	}))
	nsLister := corelisters.NewNamespaceLister(p.namespaces.GetIndexer())
	cmInformer := cmFactory.Core().V1().ConfigMaps()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()

	enqueueNS := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			queue.Add(ns.Name)
		}
	}
	enqueueCM := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == RootConfigMap {
			queue.Add(cm.Namespace)
		}
	}
	// No resync whatever the informer's default: the root's changes
	// requeue every namespace (onRootChange).
	nsReg, err := p.namespaces.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueNS, UpdateFunc: func(_, o any) { enqueueNS(o) },
	}, 0)
	if err != nil {
		return fmt.Errorf("watch namespaces: %w", err)
	}
	// Leadership can end and come back: leave nothing behind on the
	// shared informer.
	defer func() { _ = p.namespaces.RemoveEventHandler(nsReg) }()
	if _, err := cmInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueCM, UpdateFunc: func(_, o any) { enqueueCM(o) }, DeleteFunc: enqueueCM,
	}); err != nil {
		return fmt.Errorf("watch root ConfigMaps: %w", err)
	}
	cmFactory.Start(ctx.Done())
	defer cmFactory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), nsReg.HasSynced, cmInformer.Informer().HasSynced) {
		return nil // ctx ended
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.onRootChange(ctx, nsLister, queue) })
	wg.Go(func() {
		<-ctx.Done()
		queue.ShutDown()
	})
	for p.processNext(ctx, queue, nsLister, cmInformer.Lister()) {
	}
	return nil
}

// onRootChange requeues every namespace whenever the root changes.
func (p *RootPublisher) onRootChange(ctx context.Context, nsLister corelisters.NamespaceLister, queue workqueue.TypedRateLimitingInterface[string]) {
	for {
		_, changed := p.authority.Watch()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		all, err := nsLister.List(labels.Everything())
		if err != nil {
			continue
		}
		for _, ns := range all {
			queue.Add(ns.Name)
		}
	}
}

func (p *RootPublisher) processNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string],
	nsLister corelisters.NamespaceLister, cmLister corelisters.ConfigMapLister,
) bool {
	ns, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(ns)
	if err := p.reconcile(ctx, ns, nsLister, cmLister); err != nil {
		p.log.Warn("publish root", "namespace", ns, "err", err)
		queue.AddRateLimited(ns)
		return true
	}
	queue.Forget(ns)
	return true
}

func (p *RootPublisher) reconcile(ctx context.Context, name string, nsLister corelisters.NamespaceLister, cmLister corelisters.ConfigMapLister) error {
	if systemNamespaces[name] && !p.publishSystem {
		return nil
	}
	ns, err := nsLister.Get(name)
	if apierrors.IsNotFound(err) || (err == nil && ns.Status.Phase == corev1.NamespaceTerminating) {
		return nil
	}
	if err != nil {
		return err
	}
	root := string(p.authority.Bundle().RootPEM())
	cms := p.client.CoreV1().ConfigMaps(name)
	cm, err := cmLister.ConfigMaps(name).Get(RootConfigMap)
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: RootConfigMap, Namespace: name, Labels: map[string]string{"istio.io/config": "true"}},
			Data:       map[string]string{RootConfigMapKey: root},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("configmap appeared before the cache saw it: retry")
		}
		return err
	}
	if err != nil {
		return err
	}
	if cm.Data[RootConfigMapKey] == root {
		return nil
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[RootConfigMapKey] = root
	start := time.Now()
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	if err == nil {
		p.log.Info("updated root configmap", "namespace", name, "took", time.Since(start))
	}
	return err
}
