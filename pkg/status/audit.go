package status

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshplane/discovery/pkg/model"
)

// ConditionSetter sets or removes one condition in the status of an Istio
// resource. KubeWriter is the real one.
type ConditionSetter interface {
	// SetCondition makes the condition of type typ on key say c (nil:
	// removes it) if the resource is still at generation, and returns one
	// of the Outcome names.
	SetCondition(ctx context.Context, key model.Key, generation int64, typ string, c *Condition) (string, error)
}

var _ ConditionSetter = (*KubeWriter)(nil)

// Retry back-off of a failed reconciliation of one resource.
const (
	retryMin = time.Second
	retryMax = 5 * time.Minute
)

// Auditor finds, in every Istio config of the World, what discovery
// ignores (Unsupported), logs it once per version and keeps a gauge of it
// (Start, on every replica), and on the leader keeps the
// UnsupportedConditionType condition of each resource in step (Lead).
type Auditor struct {
	opts  Options
	world func() *model.World
	w     ConditionSetter // nil: no cluster, nothing to write
	log   *slog.Logger
	infra GatewayInfraSource // nil: none (gatewayinfra.go)
	m     *auditMetrics
	now   func() time.Time
	retry time.Duration // first retry back-off (retryMin; shorter in tests)

	mu      sync.Mutex
	pending map[model.Key]bool // changed since the last audit
	full    bool               // audit every config
	wake    chan struct{}

	// queue is the leader's work: keys whose condition is not what it
	// should be. nil while this replica does not lead.
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[model.Key]]

	// patches says what generation refused of EnvoyFilters (nil: none
	// reported). Set before Start.
	patches PatchRefusals

	// Owned by Start's goroutine.
	seen    map[model.Key]seenConfig
	counts  map[[2]string]int // kind, field -> configs
	refused map[string]int    // kind -> configs with refusals
}

// seenConfig is the last judged version of one config.
type seenConfig struct {
	version string
	finding Finding
	refused []string // Refused
}

// condition is one condition type the Auditor keeps, with what a config
// should carry.
type condition struct {
	typ  string
	want func(a *Auditor, c *model.Config, now time.Time) *Condition
}

// conditions are the conditions the Auditor keeps in step.
var conditions = []condition{
	{UnsupportedConditionType, func(_ *Auditor, c *model.Config, now time.Time) *Condition {
		return wantCondition(c, Unsupported(c), now)
	}},
	{RefusedConditionType, func(_ *Auditor, c *model.Config, now time.Time) *Condition {
		return wantRefusedCondition(c, Refused(c), now)
	}},
	{PatchRefusedConditionType, (*Auditor).wantPatchRefused},
}

// inStep reports whether every condition of c is what it should be.
func (a *Auditor) inStep(c *model.Config) bool {
	for _, k := range conditions {
		if !inSync(conditionsOf(c.Object), k.typ, k.want(a, c, time.Time{})) {
			return false
		}
	}
	return true
}

// NewAuditor returns an Auditor reading world (the Store's World) and
// writing through w; with w nil (no cluster) it only logs and counts.
// Subscribe its Observe to the Store.
func NewAuditor(opts Options, world func() *model.World, w ConditionSetter, log *slog.Logger, reg prometheus.Registerer) (*Auditor, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newAuditMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("status metrics: %w", err)
	}
	return &Auditor{
		opts: opts, world: world, w: w, log: log, m: m, now: time.Now, retry: retryMin,
		pending: map[model.Key]bool{}, full: true, wake: make(chan struct{}, 1),
		seen: map[model.Key]seenConfig{}, counts: map[[2]string]int{}, refused: map[string]int{},
	}, nil
}

// Observe notes the Istio configs an Update changed. It runs under the
// Store's lock: it only records keys (a set, so bounded by the number of
// configs) and never blocks.
func (a *Auditor) Observe(u *model.Update) {
	a.mu.Lock()
	n := 0
	for _, c := range u.Changes {
		if c.Key.Kind.IsConfig() {
			a.pending[c.Key] = true
			n++
		}
	}
	a.mu.Unlock()
	if n > 0 {
		a.signal()
	}
}

func (a *Auditor) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// auditAll asks for every config to be judged again (a new leader must
// look at each one's status).
func (a *Auditor) auditAll() {
	a.mu.Lock()
	a.full = true
	a.mu.Unlock()
	a.signal()
}

// Start judges configs as they change until ctx ends. Run it on every
// replica: each logs and counts what it serves.
func (a *Auditor) Start(ctx context.Context) error {
	a.signal() // the first audit covers everything (full is set)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.wake:
			a.audit()
		}
	}
}

func (a *Auditor) take() (map[model.Key]bool, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	keys, full := a.pending, a.full
	a.pending, a.full = map[model.Key]bool{}, false
	return keys, full
}

// audit judges the pending configs (or all) in the current World and, on
// the leader, queues those whose condition is not what it should be.
func (a *Auditor) audit() {
	keys, full := a.take()
	w := a.world()
	if full {
		for k := range a.seen {
			keys[k] = true
		}
		for _, kind := range model.CRDKinds {
			for _, c := range w.Configs(kind) {
				keys[c.Key] = true
			}
		}
	}
	q := a.queue.Load()
	for k := range keys {
		c := w.Config(k.Kind, k.Namespace, k.Name)
		if c == nil {
			a.forget(k)
			continue
		}
		if c.Key.Kind.IsGatewayAPI() {
			a.judgeGatewayAPI(w, c)
			if q != nil && a.gatewayWriter() != nil && !gatewayInStep(c, a.gatewayReport(w, k)) {
				(*q).Add(k)
			}
			continue
		}
		a.judge(c)
		if q != nil && !c.Derived && !a.inStep(c) {
			(*q).Add(k)
		}
	}
}

// judge returns what discovery ignores of c, logging it and counting it
// the first time this version of c is seen.
func (a *Auditor) judge(c *model.Config) Finding {
	v := version(c)
	prev, ok := a.seen[c.Key]
	if ok && prev.version == v {
		return prev.finding
	}
	f, refused := Unsupported(c), Refused(c)
	a.count(c.Key.Kind, prev.finding, -1)
	a.count(c.Key.Kind, f, +1)
	a.countRefused(c.Key.Kind, prev.refused, -1)
	a.countRefused(c.Key.Kind, refused, +1)
	a.seen[c.Key] = seenConfig{version: v, finding: f, refused: refused}
	if len(refused) > 0 {
		a.log.Warn("Istio resource has values Envoy refuses: what is built from them fails closed", "kind", string(c.Key.Kind),
			"resource", c.Key.Namespace+"/"+c.Key.Name, "version", v, "problems", refused)
	}
	switch {
	case f.Kind:
		a.log.Warn("Istio kind not supported: the resource has no effect", "kind", string(c.Key.Kind),
			"resource", c.Key.Namespace+"/"+c.Key.Name)
	case len(f.Fields) > 0:
		a.log.Warn("Istio resource sets fields not supported yet: they have no effect", "kind", string(c.Key.Kind),
			"resource", c.Key.Namespace+"/"+c.Key.Name, "version", v, "fields", f.Fields)
	}
	return f
}

// judgeGatewayAPI logs and counts, once per version of its report, what
// the translation of a Gateway API object did not act on or refused.
func (a *Auditor) judgeGatewayAPI(w *model.World, c *model.Config) {
	f, refused, v := gatewayFinding(w, c)
	prev, ok := a.seen[c.Key]
	if ok && prev.version == v {
		return
	}
	a.count(c.Key.Kind, prev.finding, -1)
	a.count(c.Key.Kind, f, +1)
	a.countRefused(c.Key.Kind, prev.refused, -1)
	a.countRefused(c.Key.Kind, refused, +1)
	a.seen[c.Key] = seenConfig{version: v, finding: f, refused: refused}
	rep := w.GatewayAPIReport(c.Key)
	if len(refused) > 0 {
		a.log.Warn("Gateway API resource refers to what it may not, or asks for what discovery cannot apply: that traffic fails closed",
			"kind", string(c.Key.Kind), "resource", c.Key.Namespace+"/"+c.Key.Name, "version", v, "problems", refused)
	}
	if rep != nil && len(rep.Unsupported) > 0 {
		a.log.Warn("Gateway API resource uses what discovery does not translate yet", "kind", string(c.Key.Kind),
			"resource", c.Key.Namespace+"/"+c.Key.Name, "version", v, "unsupported", rep.Unsupported)
	}
}

func (a *Auditor) forget(k model.Key) {
	if prev, ok := a.seen[k]; ok {
		a.count(k.Kind, prev.finding, -1)
		a.countRefused(k.Kind, prev.refused, -1)
		delete(a.seen, k)
	}
}

// count adds delta to the gauge of each field of f.
func (a *Auditor) count(kind model.Kind, f Finding, delta int) {
	for _, field := range gaugeFields(f) {
		k := [2]string{string(kind), field}
		a.counts[k] += delta
		if a.counts[k] <= 0 {
			delete(a.counts, k)
			a.m.configs.DeleteLabelValues(k[0], k[1])
			continue
		}
		a.m.configs.WithLabelValues(k[0], k[1]).Set(float64(a.counts[k]))
	}
}

// countRefused adds delta to the gauge of refused configs of kind when
// refused is not empty.
func (a *Auditor) countRefused(kind model.Kind, refused []string, delta int) {
	if len(refused) == 0 {
		return
	}
	a.refused[string(kind)] += delta
	if n := a.refused[string(kind)]; n > 0 {
		a.m.refused.WithLabelValues(string(kind)).Set(float64(n))
		return
	}
	delete(a.refused, string(kind))
	a.m.refused.DeleteLabelValues(string(kind))
}

// gaugeFields are f's gauge labels: fields without "spec." and list
// indexes (as the generator's counter names them), "*" for a whole kind.
func gaugeFields(f Finding) []string {
	if f.Kind {
		return []string{"*"}
	}
	seen := map[string]bool{}
	var out []string
	for _, field := range f.Fields {
		field = strings.ReplaceAll(strings.TrimPrefix(field, "spec."), "[]", "")
		if !seen[field] {
			seen[field] = true
			out = append(out, field)
		}
	}
	return out
}

// Lead keeps the UnsupportedConditionType condition of every Istio
// resource in step until ctx ends. Run it on the leader only, with a
// ConditionSetter. Its queue holds each resource at most once; writes are
// rate-limited (--status-unsupported-qps) and a failed one is retried with
// an exponential back-off. Nothing here is on the xDS path.
func (a *Auditor) Lead(ctx context.Context) error {
	if a.w == nil {
		<-ctx.Done()
		return nil
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[model.Key](a.retry, retryMax),
		workqueue.TypedRateLimitingQueueConfig[model.Key]{})
	a.queue.Store(&q)
	a.auditAll()
	limit := newLimiter(a.opts)
	var wg sync.WaitGroup
	wg.Go(func() { <-ctx.Done(); q.ShutDown() })
	for a.next(ctx, q, limit) {
	}
	a.queue.Store(nil)
	wg.Wait()
	return nil
}

func newLimiter(o Options) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(o.UnsupportedQPS), o.UnsupportedBurst)
}

// next reconciles one queued resource; false once the queue is shut down.
func (a *Auditor) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[model.Key], limit *rate.Limiter) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	if err := a.reconcile(ctx, key, limit); err != nil {
		if ctx.Err() != nil {
			return true
		}
		a.m.writes.WithLabelValues("failed").Inc()
		a.log.Warn("could not update the status of an Istio resource; retrying", "resource", key.String(),
			"condition", UnsupportedConditionType, "attempts", q.NumRequeues(key)+1, "error", err)
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

// reconcile brings key's conditions in step with its config in the
// current World. A config gone or already right needs nothing.
func (a *Auditor) reconcile(ctx context.Context, key model.Key, limit *rate.Limiter) error {
	if key.Kind.IsGatewayAPI() {
		return a.reconcileGateway(ctx, key, limit)
	}
	for _, k := range conditions {
		c := a.world().Config(key.Kind, key.Namespace, key.Name)
		if c == nil {
			return nil
		}
		want := k.want(a, c, a.now())
		if inSync(conditionsOf(c.Object), k.typ, want) {
			continue
		}
		if err := limit.Wait(ctx); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, a.opts.WriteTimeout)
		outcome, err := a.w.SetCondition(wctx, key, generation(c.Object), k.typ, want)
		cancel()
		if err != nil {
			return err
		}
		a.m.writes.WithLabelValues(outcome).Inc()
		if outcome == OutcomeSet || outcome == OutcomeCleared {
			a.log.Info("updated the status of an Istio resource", "resource", key.String(), "condition", k.typ, "result", outcome)
		}
	}
	return nil
}
