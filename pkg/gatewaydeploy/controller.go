package gatewaydeploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	gw "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"

	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/meshplane/discovery/pkg/model/gatewayapi"
	"github.com/meshplane/discovery/pkg/status"
)

// Options configure the controller.
type Options struct {
	// Enabled turns the automated deployment on (istiod:
	// PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER, on by default).
	Enabled bool
	// DomainSuffix is the cluster's DNS suffix, in the Service hostnames
	// reported as addresses.
	DomainSuffix string
	// Revision is this control plane's revision: it deploys the Gateways
	// whose istio.io/rev label names it, or that have none when it is the
	// default revision ("").
	Revision string
	// Resync is how often every Gateway is reconciled again, so that a
	// change of the injection configuration or of a parameters ConfigMap
	// (neither watched) reaches the gateways.
	Resync time.Duration
	// CRDPoll is how often the controller looks for the Gateway API CRDs
	// while they are not installed.
	CRDPoll time.Duration
	// Class has the leader create Istio's GatewayClass `istio` when it
	// is missing (ClassController), as istiod does.
	Class bool
}

// DefaultOptions has the controller on, as istiod does.
func DefaultOptions() Options {
	return Options{Enabled: true, Class: true, DomainSuffix: "cluster.local", Resync: 5 * time.Minute, CRDPoll: 10 * time.Second}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "gateway-deployment-controller", o.Enabled,
		"Create a Deployment, Service and ServiceAccount for each Gateway API Gateway of Istio's class, as istiod does (PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER). Runs on the leader.")
	fs.BoolVar(&o.Class, "gateway-class-controller", o.Class,
		"Create Istio's GatewayClass \"istio\" (controllerName istio.io/gateway-controller) when it is missing, as istiod does. Runs on the leader.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.CRDPoll <= 0 || o.Resync <= 0 {
		return errors.New("gateway deployment: the CRD poll and resync periods must be positive")
	}
	return nil
}

// Controller creates and keeps, for each Gateway of Istio's class in
// managed mode, its ServiceAccount, Deployment and Service (server-side
// apply, field manager istio.io/gateway-controller, owner references to
// the Gateway), and tells the status writer what they say. Run Start on
// the leader only.
type Controller struct {
	opts   Options
	kube   kubernetes.Interface
	gwc    gatewayclient.Interface
	pods   PodRenderer
	notify func(namespace, name string)
	log    *slog.Logger
	m      *Metrics

	mu     sync.Mutex
	infra  map[types.NamespacedName]status.GatewayInfra
	synced atomic.Bool

	// Set by Start.
	gateways    gwlisters.GatewayLister
	classes     gwlisters.GatewayClassLister
	deployments appslisters.DeploymentLister
	services    corelisters.ServiceLister
	accounts    corelisters.ServiceAccountLister
	queue       workqueue.TypedRateLimitingInterface[types.NamespacedName]
}

var _ status.GatewayInfraSource = (*Controller)(nil)

// New returns a Controller. notify (may be nil) is called, never under a
// lock of the controller's, when what GatewayInfra says of a Gateway
// changed.
func New(opts Options, kube kubernetes.Interface, gwc gatewayclient.Interface, pods PodRenderer, notify func(namespace, name string),
	log *slog.Logger, m *Metrics,
) (*Controller, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if notify == nil {
		notify = func(string, string) {}
	}
	return &Controller{
		opts: opts, kube: kube, gwc: gwc, pods: pods, notify: notify, log: log.With("component", "gateway-deployment"), m: m,
		infra: map[types.NamespacedName]status.GatewayInfra{},
	}, nil
}

// GatewayInfra returns what the controller last saw of a Gateway it
// deploys.
func (c *Controller) GatewayInfra(namespace, name string) (status.GatewayInfra, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	inf, ok := c.infra[types.NamespacedName{Namespace: namespace, Name: name}]
	return inf, ok
}

// Start waits for the Gateway API CRDs, then reconciles Gateways until ctx
// ends.
func (c *Controller) Start(ctx context.Context) error {
	if !c.opts.Enabled {
		<-ctx.Done()
		return nil
	}
	if err := wait.PollUntilContextCancel(ctx, c.opts.CRDPoll, true, c.crdsInstalled); err != nil {
		return nil // ctx ended
	}
	gwf := gatewayinformers.NewSharedInformerFactory(c.gwc, c.opts.Resync)
	gwInf, classInf := gwf.Gateway().V1().Gateways(), gwf.Gateway().V1().GatewayClasses()
	kf := informers.NewSharedInformerFactoryWithOptions(c.kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = ManagedLabel + "=" + ManagedValue
	}))
	depInf, svcInf, saInf := kf.Apps().V1().Deployments(), kf.Core().V1().Services(), kf.Core().V1().ServiceAccounts()
	c.gateways, c.classes = gwInf.Lister(), classInf.Lister()
	c.deployments, c.services, c.accounts = depInf.Lister(), svcInf.Lister(), saInf.Lister()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](time.Second, 5*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{})
	c.mu.Lock()
	c.queue = q
	c.mu.Unlock()
	if err := c.handlers(gwInf.Informer(), classInf.Informer(), depInf.Informer(), svcInf.Informer(), saInf.Informer()); err != nil {
		return err
	}
	gwf.Start(ctx.Done())
	kf.Start(ctx.Done())
	defer gwf.Shutdown()
	defer kf.Shutdown()
	for typ, ok := range gwf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("gateway deployment: %v informer did not sync", typ)
		}
	}
	for typ, ok := range kf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("gateway deployment: %v informer did not sync", typ)
		}
	}
	go func() { <-ctx.Done(); c.queue.ShutDown() }()
	c.initial(ctx)
	c.log.Info("gateway deployment controller started")
	for c.next(ctx) {
	}
	c.synced.Store(false)
	c.clearInfra()
	return nil
}

// initial reconciles every Gateway once (a failure is retried through the
// queue), then says the controller is synced and asks for the status of
// every Gateway: until then the status writer holds Gateway status back,
// so that a Gateway is not reported Programmed from the translation alone
// (its Service exists) while its Deployment may have no replica.
func (c *Controller) initial(ctx context.Context) {
	gws, _ := c.gateways.List(labels.Everything())
	for _, g := range gws {
		key := types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
		if err := c.reconcile(ctx, key); err != nil && ctx.Err() == nil {
			c.queue.AddRateLimited(key)
		}
	}
	c.synced.Store(true)
	for _, g := range gws {
		c.notify(g.Namespace, g.Name)
	}
}

// Synced reports whether every Gateway has been looked at since this
// replica started leading.
func (c *Controller) Synced() bool { return c.synced.Load() }

// queued is how many Gateways wait for reconciliation (-1 before Start
// has made its queue).
func (c *Controller) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queue == nil {
		return -1
	}
	return c.queue.Len()
}

// crdsInstalled reports whether the API server serves Gateways and
// GatewayClasses in v1.
func (c *Controller) crdsInstalled(context.Context) (bool, error) {
	res, err := c.kube.Discovery().ServerResourcesForGroupVersion(gw.GroupVersion.String())
	if err != nil {
		return false, nil // not served yet: look again
	}
	found := 0
	for _, r := range res.APIResources {
		if r.Name == "gateways" || r.Name == "gatewayclasses" {
			found++
		}
	}
	return found == 2, nil
}

// handlers queue the Gateway each event concerns.
func (c *Controller) handlers(gwInf, classInf, depInf, svcInf, saInf cache.SharedIndexInformer) error {
	onGateway := cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { c.enqueueObject(o) },
		UpdateFunc: func(old, o any) {
			if !statusOnly(old, o) {
				c.enqueueObject(o)
			}
		},
		DeleteFunc: func(o any) { c.enqueueObject(o) },
	}
	if _, err := gwInf.AddEventHandler(onGateway); err != nil {
		return err
	}
	onClass := func(o any) {
		if cl, ok := unwrap(o).(*gw.GatewayClass); ok {
			c.enqueueClass(cl.Name)
		}
	}
	if _, err := classInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onClass, UpdateFunc: func(_, o any) { onClass(o) }, DeleteFunc: onClass,
	}); err != nil {
		return err
	}
	onOwned := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.enqueueOwner(o) },
		UpdateFunc: func(_, o any) { c.enqueueOwner(o) },
		DeleteFunc: func(o any) { c.enqueueOwner(o) },
	}
	for _, inf := range []cache.SharedIndexInformer{depInf, svcInf, saInf} {
		if _, err := inf.AddEventHandler(onOwned); err != nil {
			return err
		}
	}
	return nil
}

// statusOnly reports whether a Gateway's update changed only what is not
// rendered (its status, written by the leader): a resync (same version)
// is not one.
func statusOnly(old, cur any) bool {
	a, ok1 := old.(*gw.Gateway)
	b, ok2 := cur.(*gw.Gateway)
	return ok1 && ok2 && a.ResourceVersion != b.ResourceVersion && a.Generation == b.Generation &&
		reflect.DeepEqual(a.Labels, b.Labels) && reflect.DeepEqual(a.Annotations, b.Annotations)
}

func unwrap(o any) any {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return o
}

func (c *Controller) enqueueObject(o any) {
	if m, ok := unwrap(o).(metav1.Object); ok {
		c.queue.Add(types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()})
	}
}

func (c *Controller) enqueueClass(class string) {
	gws, _ := c.gateways.List(labels.Everything())
	for _, g := range gws {
		if string(g.Spec.GatewayClassName) == class {
			c.queue.Add(types.NamespacedName{Namespace: g.Namespace, Name: g.Name})
		}
	}
}

// enqueueOwner queues the Gateway that owns a managed object.
func (c *Controller) enqueueOwner(o any) {
	m, ok := unwrap(o).(metav1.Object)
	if !ok {
		return
	}
	for _, ref := range m.GetOwnerReferences() {
		if ref.Kind == "Gateway" && ref.APIVersion == gw.GroupVersion.String() {
			c.queue.Add(types.NamespacedName{Namespace: m.GetNamespace(), Name: ref.Name})
		}
	}
}

// next reconciles one queued Gateway; false once the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, key); err != nil {
		if ctx.Err() != nil {
			return true
		}
		c.m.reconciles.WithLabelValues("failed").Inc()
		c.log.Warn("could not reconcile a Gateway's deployment; retrying", "gateway", key.String(),
			"attempts", c.queue.NumRequeues(key)+1, "error", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.m.reconciles.WithLabelValues("ok").Inc()
	c.queue.Forget(key)
	return true
}

// ours reports whether a Gateway's class is Istio's: a GatewayClass of
// controllerName istio.io/gateway-controller, or the class istio when no
// GatewayClass of that name exists (istiod's built-in classes).
func (c *Controller) ours(class string) bool {
	cl, err := c.classes.Get(class)
	if err == nil {
		return string(cl.Spec.ControllerName) == gatewayapi.ControllerName
	}
	return class == gatewayapi.DefaultClassName
}

// setInfra records what is known of key (nil: nothing, it is not ours)
// and notifies the status writer when that changed.
func (c *Controller) setInfra(key types.NamespacedName, inf *status.GatewayInfra) {
	c.mu.Lock()
	old, had := c.infra[key]
	if inf == nil {
		delete(c.infra, key)
	} else {
		c.infra[key] = *inf
	}
	c.mu.Unlock()
	if had != (inf != nil) || (inf != nil && !sameInfra(old, *inf)) {
		c.notify(key.Namespace, key.Name)
	}
}

func sameInfra(a, b status.GatewayInfra) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// clearInfra forgets everything when this replica stops leading: the next
// leader's controller says what it sees.
func (c *Controller) clearInfra() {
	c.mu.Lock()
	keys := make([]types.NamespacedName, 0, len(c.infra))
	for k := range c.infra {
		keys = append(keys, k)
	}
	c.infra = map[types.NamespacedName]status.GatewayInfra{}
	c.mu.Unlock()
	for _, k := range keys {
		c.notify(k.Namespace, k.Name)
	}
}

// parameters returns the data of the ConfigMap spec.infrastructure.parametersRef
// names (in the Gateway's namespace, as istiod reads it), nil without one.
func (c *Controller) parameters(ctx context.Context, g *gw.Gateway) (map[string]string, error) {
	if g.Spec.Infrastructure == nil || g.Spec.Infrastructure.ParametersRef == nil {
		return nil, nil
	}
	ref := g.Spec.Infrastructure.ParametersRef
	if ref.Group != "" || ref.Kind != "ConfigMap" {
		return nil, fmt.Errorf("spec.infrastructure.parametersRef: %s/%s is not supported (only a ConfigMap)", ref.Group, ref.Kind)
	}
	cm, err := c.kube.CoreV1().ConfigMaps(g.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("spec.infrastructure.parametersRef: ConfigMap %s/%s does not exist", g.Namespace, ref.Name)
	}
	if err != nil {
		return nil, errTransient{err}
	}
	return cm.Data, nil
}

// errTransient is an error that retrying may cure (the API server's).
type errTransient struct{ error }

func (e errTransient) Unwrap() error { return e.error }
