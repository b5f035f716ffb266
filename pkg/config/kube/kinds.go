package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	extensionsv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshplane/discovery/pkg/model"
)

// Clients are the API clients the source reads through.
type Clients struct {
	Kube  kubernetes.Interface
	Istio istioclient.Interface
	CRDs  apiextclient.Interface
	// Gateway reads the Kubernetes Gateway API; nil leaves its kinds
	// unread.
	Gateway gatewayclient.Interface
	// Shared, when set, is the process's factory of informers that other
	// parts read too (see SharedKinds): the source reads those kinds
	// through it instead of informers of its own, so that the API server
	// sees one LIST and WATCH of each. NewForClients sets their transform,
	// so it must come before the factory is started; the process starts
	// the factory. Build it from Kube with the source's ResyncPeriod.
	Shared informers.SharedInformerFactory
}

type newInformerFunc func(c Clients, resync time.Duration) cache.SharedIndexInformer

const all = metav1.NamespaceAll

// kindInformers builds, for every kind the source reads, an informer across all
// namespaces.
var kindInformers = map[model.Kind]newInformerFunc{
	model.KindService: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewServiceInformer(c.Kube, all, r, cache.Indexers{})
	},
	model.KindEndpointSlice: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return discoveryinformers.NewEndpointSliceInformer(c.Kube, all, r, cache.Indexers{})
	},
	model.KindPod: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewPodInformer(c.Kube, all, r, cache.Indexers{})
	},
	model.KindNamespace: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewNamespaceInformer(c.Kube, r, cache.Indexers{})
	},
	model.KindNode: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewNodeInformer(c.Kube, r, cache.Indexers{})
	},
	model.KindVirtualService: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*networkingv1.VirtualServiceList](c.Istio, c.Istio.NetworkingV1().VirtualServices(all), &networkingv1.VirtualService{}, r)
	},
	model.KindDestinationRule: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*networkingv1.DestinationRuleList](c.Istio, c.Istio.NetworkingV1().DestinationRules(all), &networkingv1.DestinationRule{}, r)
	},
	model.KindGateway: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*networkingv1.GatewayList](c.Istio, c.Istio.NetworkingV1().Gateways(all), &networkingv1.Gateway{}, r)
	},
	model.KindServiceEntry: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*networkingv1.ServiceEntryList](c.Istio, c.Istio.NetworkingV1().ServiceEntries(all), &networkingv1.ServiceEntry{}, r)
	},
	model.KindSidecar: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*networkingv1.SidecarList](c.Istio, c.Istio.NetworkingV1().Sidecars(all), &networkingv1.Sidecar{}, r)
	},
	model.KindWorkloadEntry: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*networkingv1.WorkloadEntryList](c.Istio, c.Istio.NetworkingV1().WorkloadEntries(all), &networkingv1.WorkloadEntry{}, r)
	},
	model.KindPeerAuthentication: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*securityv1.PeerAuthenticationList](c.Istio, c.Istio.SecurityV1().PeerAuthentications(all), &securityv1.PeerAuthentication{}, r)
	},
	model.KindAuthorizationPolicy: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*securityv1.AuthorizationPolicyList](c.Istio, c.Istio.SecurityV1().AuthorizationPolicies(all), &securityv1.AuthorizationPolicy{}, r)
	},
	model.KindTelemetry: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*telemetryv1.TelemetryList](c.Istio, c.Istio.TelemetryV1().Telemetries(all), &telemetryv1.Telemetry{}, r)
	},
	model.KindRequestAuthentication: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*securityv1.RequestAuthenticationList](c.Istio, c.Istio.SecurityV1().RequestAuthentications(all), &securityv1.RequestAuthentication{}, r)
	},
	model.KindEnvoyFilter: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*networkingv1alpha3.EnvoyFilterList](c.Istio, c.Istio.NetworkingV1alpha3().EnvoyFilters(all), &networkingv1alpha3.EnvoyFilter{}, r)
	},
	model.KindWorkloadGroup: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*networkingv1.WorkloadGroupList](c.Istio, c.Istio.NetworkingV1().WorkloadGroups(all), &networkingv1.WorkloadGroup{}, r)
	},
	model.KindProxyConfig: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*networkingv1beta1.ProxyConfigList](c.Istio, c.Istio.NetworkingV1beta1().ProxyConfigs(all), &networkingv1beta1.ProxyConfig{}, r)
	},
	model.KindWasmPlugin: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*extensionsv1alpha1.WasmPluginList](c.Istio, c.Istio.ExtensionsV1alpha1().WasmPlugins(all), &extensionsv1alpha1.WasmPlugin{}, r)
	},
	model.KindTrafficExtension: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*extensionsv1alpha1.TrafficExtensionList](c.Istio, c.Istio.ExtensionsV1alpha1().TrafficExtensions(all), &extensionsv1alpha1.TrafficExtension{}, r)
	},
	model.KindGatewayClass: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*gatewayv1.GatewayClassList](c.Gateway, c.Gateway.GatewayV1().GatewayClasses(), &gatewayv1.GatewayClass{}, r)
	},
	model.KindKubernetesGateway: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*gatewayv1.GatewayList](c.Gateway, c.Gateway.GatewayV1().Gateways(all), &gatewayv1.Gateway{}, r)
	},
	model.KindHTTPRoute: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*gatewayv1.HTTPRouteList](c.Gateway, c.Gateway.GatewayV1().HTTPRoutes(all), &gatewayv1.HTTPRoute{}, r)
	},
	model.KindGRPCRoute: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*gatewayv1.GRPCRouteList](c.Gateway, c.Gateway.GatewayV1().GRPCRoutes(all), &gatewayv1.GRPCRoute{}, r)
	},
	model.KindTCPRoute: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*gatewayv1.TCPRouteList](c.Gateway, c.Gateway.GatewayV1().TCPRoutes(all), &gatewayv1.TCPRoute{}, r)
	},
	model.KindTLSRoute: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*gatewayv1.TLSRouteList](c.Gateway, c.Gateway.GatewayV1().TLSRoutes(all), &gatewayv1.TLSRoute{}, r)
	},
	model.KindReferenceGrant: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*gatewayv1.ReferenceGrantList](c.Gateway, c.Gateway.GatewayV1().ReferenceGrants(all), &gatewayv1.ReferenceGrant{}, r)
	},
	model.KindBackendTLSPolicy: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return istioInformer[*gatewayv1.BackendTLSPolicyList](c.Gateway, c.Gateway.GatewayV1().BackendTLSPolicies(all), &gatewayv1.BackendTLSPolicy{}, r)
	},
	// Every ConfigMap, cut to its CA keys (stripCAConfigMap), for the
	// caCertificateRefs of BackendTLSPolicies: istiod's credentials
	// controller watches every ConfigMap too.
	model.KindCAConfigMap: func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewConfigMapInformer(c.Kube, all, r, cache.Indexers{})
	},
}

// meshConfigMapInformer watches the one ConfigMap that holds the
// MeshConfig, by name, in its namespace (as istiod's kubemesh does): no
// other ConfigMap is listed or cached.
func meshConfigMapInformer(ns, name string) newInformerFunc {
	return func(c Clients, r time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredConfigMapInformer(c.Kube, ns, r, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(metav1.ObjectNameField, name).String()
		})
	}
}

// listerWatcher is what every typed Istio client offers.
type listerWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// istioInformer builds an informer for one Istio kind. istio.io/client-go's
// generated informers list and watch with context.TODO() and do not tell
// the reflector whether the client supports streaming lists; this one
// passes the informer's context through, so stopping a kind (its CRD went
// away) also cancels a list in flight, and lets a fake client opt out of
// streaming lists as client-go's own fakes do.
func istioInformer[L runtime.Object](client any, lw listerWatcher[L], example runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return lw.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return lw.Watch(ctx, opts)
		},
	}, client), example, cache.SharedIndexInformerOptions{
		ResyncPeriod:      resync,
		ObjectDescription: fmt.Sprintf("%T", example),
	})
}

// watcher runs one kind's informer and turns its notifications into
// events. An Istio kind's watcher remembers the objects it reported, so
// that when the kind's CRD goes away it can delete exactly those.
type watcher struct {
	kind     model.Kind
	log      *slog.Logger
	queue    *batchQueue
	metrics  *metrics
	informer cache.SharedIndexInformer
	reg      cache.ResourceEventHandlerRegistration
	cancel   context.CancelFunc
	shared   bool // the informer is Clients.Shared's: the process runs it

	mu      sync.Mutex
	stopped bool
	keys    map[model.NamespacedName]struct{} // nil unless the kind can go away
}

var _ cache.ResourceEventHandler = (*watcher)(nil)

func newWatcher(s *Source, kind model.Kind) (*watcher, error) {
	newInformer := kindInformers[kind]
	if kind == model.KindConfigMap {
		newInformer = meshConfigMapInformer(s.opts.MeshNamespace, s.opts.MeshConfigMap)
	}
	w := &watcher{
		kind:    kind,
		log:     s.log.With("kind", string(kind)),
		queue:   s.queue,
		metrics: s.metrics,
	}
	if kind.IsConfig() {
		w.keys = map[model.NamespacedName]struct{}{}
	}
	if s.clients.Shared != nil {
		w.informer = sharedInformer(s.clients.Shared, kind)
	}
	if w.informer != nil {
		// prepareShared set its transform and error handler; the
		// process runs it.
		w.shared = true
		reg, err := w.informer.AddEventHandlerWithResyncPeriod(w, s.opts.ResyncPeriod)
		if err != nil {
			return nil, err
		}
		w.reg = reg
		return w, nil
	}
	w.informer = newInformer(s.clients, s.opts.ResyncPeriod)
	transform := stripObject
	if kind == model.KindCAConfigMap {
		transform = stripCAConfigMap
	}
	if err := w.informer.SetTransform(transform); err != nil {
		return nil, err
	}
	if err := w.informer.SetWatchErrorHandlerWithContext(watchErrorHandler(w.log, w.metrics, string(kind))); err != nil {
		return nil, err
	}
	reg, err := w.informer.AddEventHandler(w)
	if err != nil {
		return nil, err
	}
	w.reg = reg
	return w, nil
}

// start runs the informer until ctx ends or stop is called.
func (w *watcher) start(ctx context.Context, wg *sync.WaitGroup) {
	ctx, w.cancel = context.WithCancel(ctx)
	if w.shared {
		// Leave the shared informer running for its other readers.
		wg.Go(func() {
			<-ctx.Done()
			if err := w.informer.RemoveEventHandler(w.reg); err != nil {
				w.log.Warn("remove event handler from the shared informer", "err", err)
			}
		})
	} else {
		wg.Go(func() { w.informer.RunWithContext(ctx) })
	}
	w.metrics.watched.WithLabelValues(string(w.kind)).Set(1)
	gvr := w.kind.GroupVersionResource()
	w.log.Info("watching kind", "resource", gvr.GroupVersion().String()+"/"+gvr.Resource)
}

// stop ends the informer and reports every object it had reported as
// deleted. Notifications still in flight are dropped, so nothing it
// reported survives the stop. It returns how many objects were deleted.
func (w *watcher) stop() int {
	w.mu.Lock()
	w.stopped = true
	events := make([]model.Event, 0, len(w.keys))
	for nn := range w.keys {
		events = append(events, model.Event{Op: model.OpDelete, Key: w.key(nn.Namespace, nn.Name)})
	}
	w.keys = nil
	w.queue.push(events...)
	w.metrics.events.WithLabelValues(string(w.kind), model.OpDelete.String()).Add(float64(len(events)))
	w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
	w.metrics.watched.WithLabelValues(string(w.kind)).Set(0)
	return len(events)
}

func (w *watcher) hasSynced() bool { return w.reg.HasSynced() }

func (w *watcher) key(ns, name string) model.Key {
	return model.Key{Kind: w.kind, Namespace: ns, Name: name}
}

// OnAdd reports an object the informer saw for the first time.
func (w *watcher) OnAdd(obj any, _ bool) { w.upsert(obj) }

// OnUpdate reports a changed object. A resync, or a relist after an
// outage, hands over objects whose resourceVersion did not change: those
// are skipped here.
func (w *watcher) OnUpdate(oldObj, newObj any) {
	o, err1 := meta.Accessor(oldObj)
	n, err2 := meta.Accessor(newObj)
	if err1 == nil && err2 == nil && n.GetResourceVersion() != "" && o.GetResourceVersion() == n.GetResourceVersion() {
		return
	}
	w.upsert(newObj)
}

// OnDelete reports a deleted object; obj may be a tombstone
// (cache.DeletedFinalStateUnknown) when the informer missed the delete
// itself and learned of it from a relist.
func (w *watcher) OnDelete(obj any) {
	var ns, name string
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		var err error
		if ns, name, err = cache.SplitMetaNamespaceKey(tomb.Key); err != nil {
			w.log.Error("tombstone with a bad key", "key", tomb.Key, "err", err)
			return
		}
	} else {
		acc, err := meta.Accessor(obj)
		if err != nil {
			w.log.Error("deleted object without metadata", "type", typeName(obj), "err", err)
			return
		}
		ns, name = acc.GetNamespace(), acc.GetName()
	}
	w.emit(model.Event{Op: model.OpDelete, Key: w.key(ns, name)})
}

func (w *watcher) upsert(obj any) {
	ro, ok := obj.(runtime.Object)
	if !ok {
		w.log.Error("informer handed over a non-object", "type", typeName(obj))
		return
	}
	acc, err := meta.Accessor(ro)
	if err != nil {
		w.log.Error("object without metadata", "type", typeName(obj), "err", err)
		return
	}
	w.emit(model.Event{Op: model.OpUpsert, Key: w.key(acc.GetNamespace(), acc.GetName()), Object: ro})
}

func typeName(obj any) string { return fmt.Sprintf("%T", obj) }

func (w *watcher) emit(ev model.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if w.keys != nil {
		nn := model.NamespacedName{Namespace: ev.Key.Namespace, Name: ev.Key.Name}
		if ev.Op == model.OpDelete {
			delete(w.keys, nn)
		} else {
			w.keys[nn] = struct{}{}
		}
	}
	w.queue.push(ev)
	w.metrics.events.WithLabelValues(string(w.kind), ev.Op.String()).Inc()
}

// watchErrorHandler replaces client-go's default handler so that list and
// watch failures are logged through our logger, with the kind, and
// counted. The informer retries with back-off after each.
func watchErrorHandler(log *slog.Logger, m *metrics, kind string) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, _ *cache.Reflector, err error) {
		if ctx.Err() != nil {
			return
		}
		m.watchErrors.WithLabelValues(kind).Inc()
		switch {
		case errors.Is(err, io.EOF), apierrors.IsResourceExpired(err), apierrors.IsGone(err):
			log.Debug("watch closed; resuming", "err", err)
		default:
			log.Warn("list/watch failed; retrying", "err", err)
		}
	}
}
