package autoregister

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/server"
)

var _ server.Registrar = (*Controller)(nil)

// Controller keeps the WorkloadEntries of this replica's registered
// proxies. It implements server.Registrar.
type Controller struct {
	opts   Options
	world  func() *model.World
	client istioclient.Interface // nil without an API server (file mode)
	log    *slog.Logger
	m      *metrics
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	now    func() time.Time

	mu      sync.Mutex
	entries map[types.NamespacedName]*entry
	streams map[*model.Proxy]types.NamespacedName
}

// entry is what this replica's streams ask of one WorkloadEntry, and what
// of it has been written.
type entry struct {
	group string
	// auto is set for an auto-registered entry; unset, the entry existed
	// (WORKLOAD_ENTRY) and only its connection and health are written.
	auto bool
	// conns are the open streams of the proxy (a proxy may hold more than
	// one: a reconnect can open before the old stream is seen to end),
	// with the time each opened.
	conns map[*model.Proxy]time.Time
	// proxy, caller and connectedAt are the latest stream's.
	proxy       *model.Proxy
	caller      ca.Identity
	connectedAt time.Time
	// disconnectedAt is when the last stream ended; zero while connected.
	disconnectedAt time.Time
	// health is the latest report, at healthAt.
	health   *metav1alpha1.IstioCondition
	healthAt time.Time
	// written* are what the API server has been brought up to.
	writtenConnected, writtenDisconnected, writtenHealth time.Time
	// settled is set once the entry needs nothing more for its current
	// state (owned elsewhere, refused, or gone).
	settled bool
}

func (e *entry) connected() bool { return len(e.conns) > 0 }

// New returns a Controller reading WorkloadGroups from world and writing
// WorkloadEntries through client; with a nil client (no cluster) it
// registers nothing and says so for every proxy that asks.
func New(opts Options, world func() *model.World, client istioclient.Interface, log *slog.Logger, reg prometheus.Registerer) (*Controller, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Replica == "" {
		return nil, errors.New("auto-registration needs the replica's name")
	}
	c := &Controller{
		opts: opts, world: world, client: client, log: log, now: time.Now,
		entries: map[types.NamespacedName]*entry{},
		streams: map[*model.Proxy]types.NamespacedName{},
	}
	if client != nil {
		// Its goroutine runs from here: only with something to write.
		c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](50*time.Millisecond, opts.MaxRetryDelay),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "workloadentry-autoregistration"})
	}
	c.m = newMetrics(reg, func() float64 {
		if c.queue == nil {
			return 0
		}
		return float64(c.queue.Len())
	}, func() float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return float64(len(c.entries))
	})
	return c, nil
}

// Connect implements server.Registrar. It reads only the World and
// memory: the entry is written by the worker. A proxy is tracked when its
// node asks for auto-registration (AUTO_REGISTER_GROUP) or names an
// existing, health-checked entry (WORKLOAD_ENTRY), as istiod's OnConnect.
func (c *Controller) Connect(p *model.Proxy, caller *ca.Identity, at time.Time) (bool, error) {
	groupName, named := p.Metadata.AutoRegisterGroup, p.Metadata.WorkloadEntry
	if groupName == "" && named == "" {
		return false, nil
	}
	what := "auto-registration in WorkloadGroup " + p.Namespace + "/" + model.Clip(groupName)
	if groupName == "" {
		what = "health checks of WorkloadEntry " + p.Namespace + "/" + model.Clip(named)
	}
	log := c.log.With("proxy", model.Clip(p.ID), "for", what)
	if !c.opts.Enabled {
		log.Warn("proxy asks for a WorkloadEntry, which --workload-entry-auto-registration=false turns off; served without one")
		c.m.errors.WithLabelValues("disabled").Inc()
		return false, nil
	}
	if c.client == nil {
		log.Warn("proxy asks for a WorkloadEntry, which needs a Kubernetes API server: not supported in file mode; served without one")
		c.m.errors.WithLabelValues("unsupported").Inc()
		return false, nil
	}
	if caller == nil {
		// Before any lookup: an unauthenticated stream may control
		// nothing, whatever exists.
		return false, c.refuseIdentity(log, what, CheckIdentity(nil, p.Namespace, ""))
	}
	key, auto, err := c.entryFor(p, caller, what, log)
	if err != nil || key.Name == "" {
		return false, err
	}
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		e = &entry{conns: map[*model.Proxy]time.Time{}}
		c.entries[key] = e
	}
	e.conns[p] = at
	if !at.Before(e.connectedAt) {
		e.group, e.auto, e.proxy, e.caller, e.connectedAt = groupName, auto, p, *caller, at
	}
	e.disconnectedAt, e.settled = time.Time{}, false
	c.streams[p] = key
	c.mu.Unlock()
	c.queue.Add(key)
	return true, nil
}

// entryFor finds the entry p stands for and checks that caller may
// control it; an empty key means nothing to track.
func (c *Controller) entryFor(p *model.Proxy, caller *ca.Identity, what string, log *slog.Logger) (types.NamespacedName, bool, error) {
	w := c.world()
	if p.Metadata.AutoRegisterGroup == "" {
		key := types.NamespacedName{Namespace: p.Namespace, Name: p.Metadata.WorkloadEntry}
		we, _ := objectOf[*networkingv1.WorkloadEntry](w.Config(model.KindWorkloadEntry, key.Namespace, key.Name))
		if we == nil {
			c.m.errors.WithLabelValues("no_entry").Inc()
			log.Warn("refused: no such WorkloadEntry")
			return types.NamespacedName{}, false, status.Errorf(codes.FailedPrecondition, "%s: not found", what)
		}
		if _, ok := we.Annotations[AnnotationHealthChecks]; !ok {
			return types.NamespacedName{}, false, nil // not health-checked: nothing to do, as istiod
		}
		if err := CheckIdentity(caller, key.Namespace, we.Spec.GetServiceAccount()); err != nil {
			return types.NamespacedName{}, false, c.refuseIdentity(log, what, err)
		}
		return key, false, nil
	}
	name := EntryName(p)
	if name == "" {
		c.m.errors.WithLabelValues("invalid_node").Inc()
		return types.NamespacedName{}, false, status.Error(codes.InvalidArgument, "auto-registration needs the proxy's IP address (INSTANCE_IPS or the node ID's)")
	}
	group, _ := objectOf[*networkingv1.WorkloadGroup](w.Config(model.KindWorkloadGroup, p.Namespace, p.Metadata.AutoRegisterGroup))
	if group == nil {
		// istiod refuses the stream too (FailedPrecondition); the agent
		// retries, and the group may exist by then.
		c.m.errors.WithLabelValues("no_group").Inc()
		log.Warn("refused auto-registration: no such WorkloadGroup")
		return types.NamespacedName{}, false, status.Errorf(codes.FailedPrecondition, "%s: WorkloadGroup not found", what)
	}
	sa := group.Spec.GetTemplate().GetServiceAccount()
	if existing, _ := objectOf[*networkingv1.WorkloadEntry](w.Config(model.KindWorkloadEntry, p.Namespace, name)); existing != nil {
		sa = existing.Spec.GetServiceAccount()
	}
	if err := CheckIdentity(caller, p.Namespace, sa); err != nil {
		return types.NamespacedName{}, false, c.refuseIdentity(log, what, err)
	}
	return types.NamespacedName{Namespace: p.Namespace, Name: name}, true, nil
}

// refuseIdentity counts and logs a refusal; the caller gets an opaque
// PermissionDenied, the log the reason.
func (c *Controller) refuseIdentity(log *slog.Logger, what string, reason error) error {
	c.m.errors.WithLabelValues("identity").Inc()
	log.Warn("refused", "reason", reason.Error())
	return status.Errorf(codes.PermissionDenied, "%s: permission denied", what)
}

// Health implements server.Registrar.
func (c *Controller) Health(p *model.Proxy, healthy bool, message string, at time.Time) {
	c.mu.Lock()
	key, ok := c.streams[p]
	if e := c.entries[key]; ok && e != nil && !at.Before(e.healthAt) {
		e.health, e.healthAt = healthCondition(healthy, message, at), at
	}
	c.mu.Unlock()
	if ok {
		c.queue.Add(key)
	}
}

// Disconnect implements server.Registrar.
func (c *Controller) Disconnect(p *model.Proxy, at time.Time) {
	c.mu.Lock()
	key, ok := c.streams[p]
	delete(c.streams, p)
	if e := c.entries[key]; ok && e != nil {
		delete(e.conns, p)
		if !e.connected() {
			e.disconnectedAt, e.settled = at, false
		}
	}
	c.mu.Unlock()
	if ok {
		c.queue.Add(key)
	}
}

// Start runs the worker until ctx ends.
func (c *Controller) Start(ctx context.Context) error {
	if c.queue == nil {
		<-ctx.Done()
		return nil
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return nil
		}
		if err := c.reconcile(ctx, key); err != nil && ctx.Err() == nil {
			c.m.retries.Inc()
			c.m.errors.WithLabelValues("api").Inc()
			c.log.Warn("WorkloadEntry not brought up to date; retrying with back-off", "entry", key.String(), "error", err)
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// snapshot is a copy of an entry's state for one reconcile.
type snapshot struct {
	entry
	ok, live bool
}

func (c *Controller) snapshot(key types.NamespacedName) snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		return snapshot{}
	}
	s := snapshot{entry: *e, ok: true, live: e.connected()}
	s.conns = nil // the live map is c.mu's
	return s
}

// update changes the live entry of key if it is still the one s was taken
// of (same latest connection and disconnect).
func (c *Controller) update(key types.NamespacedName, s snapshot, fn func(e *entry)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil && e.connectedAt.Equal(s.connectedAt) && e.disconnectedAt.Equal(s.disconnectedAt) {
		fn(e)
	}
}

// forget drops the entry of key if it is still disconnected as in s.
func (c *Controller) forget(key types.NamespacedName, s snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil && !e.connected() && e.disconnectedAt.Equal(s.disconnectedAt) {
		delete(c.entries, key)
	}
}

func (c *Controller) reconcile(ctx context.Context, key types.NamespacedName) error {
	s := c.snapshot(key)
	if !s.ok || s.settled {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	if s.live {
		return c.reconcileConnected(ctx, key, s)
	}
	return c.reconcileDisconnected(ctx, key, s)
}

func (c *Controller) reconcileConnected(ctx context.Context, key types.NamespacedName, s snapshot) error {
	if !s.writtenConnected.Equal(s.connectedAt) {
		settled, err := c.connect(ctx, key, s)
		if err != nil {
			return err
		}
		c.update(key, s, func(e *entry) { e.writtenConnected, e.settled = s.connectedAt, settled })
		if settled {
			return nil
		}
	}
	if s.health != nil && !s.writtenHealth.Equal(s.healthAt) {
		if err := c.writeHealth(ctx, key, s.health); err != nil {
			return err
		}
		c.update(key, s, func(e *entry) {
			if e.healthAt.Equal(s.healthAt) {
				e.writtenHealth = s.healthAt
			} else {
				c.queue.Add(key) // a newer report came meanwhile
			}
		})
	}
	return nil
}

func (c *Controller) reconcileDisconnected(ctx context.Context, key types.NamespacedName, s snapshot) error {
	if !s.writtenDisconnected.Equal(s.disconnectedAt) {
		owned, err := c.disconnect(ctx, key, s)
		if err != nil {
			return err
		}
		if !owned {
			c.forget(key, s)
			return nil
		}
		c.update(key, s, func(e *entry) { e.writtenDisconnected = s.disconnectedAt })
		c.queue.AddAfter(key, c.opts.GracePeriod)
		return nil
	}
	if wait := s.disconnectedAt.Add(c.opts.GracePeriod).Sub(c.now()); wait > 0 {
		c.queue.AddAfter(key, wait)
		return nil
	}
	if err := c.cleanup(ctx, key); err != nil {
		return err
	}
	c.forget(key, s)
	return nil
}

// objectOf returns cfg's object as T, if it is one.
func objectOf[T any](cfg *model.Config) (T, bool) {
	var zero T
	if cfg == nil {
		return zero, false
	}
	o, ok := cfg.Object.(T)
	return o, ok
}
