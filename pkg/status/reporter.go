package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/server"
)

// Names of what the Reporter writes.
const (
	// ConditionType is the type of the condition in status.conditions.
	ConditionType = "discovery.meshplane.io/ProxyRejected"
	// ReasonRejected is the condition's reason while a proxy rejects the
	// configuration built from the resource.
	ReasonRejected = "ProxyNACK"
	// ReasonAccepted is its reason once a proxy accepted configuration built
	// from a newer generation.
	ReasonAccepted = "ProxyAccepted"
	// EventReason is the reason of the Warning Event on a rejection.
	EventReason = "ProxyRejectedConfig"
	// maxMessage bounds messages (Envoy's errors can be long).
	maxMessage = 1024
)

// Condition is the condition the Reporter writes on one resource.
type Condition struct {
	// Status is "True" (rejected) or "False" (accepted again).
	Status             string
	Reason             string
	Message            string
	ObservedGeneration int64
	Time               time.Time
}

// Writer writes a condition to a resource's status and, when event is not
// empty, a Warning Event with that message on it.
type Writer interface {
	Write(ctx context.Context, ref gen.ConfigRef, c Condition, event string) error
}

// Reporter turns proxies' verdicts into conditions and Events. It is a
// server.Observer.
type Reporter struct {
	opts   Options
	w      Writer // nil: log only
	log    *slog.Logger
	m      *metrics
	queue  chan report
	active atomic.Bool
	// outstanding counts configs reported rejected and not yet accepted
	// again; ACKs are wanted only while it is positive.
	outstanding atomic.Int64
	// rejected is owned by Start's goroutine.
	rejected map[model.Key]*rejection
}

// report is a verdict as queued: its sources are looked up by Start's
// goroutine, off the xDS path.
type report struct {
	proxyID, typeURL, err string
	rejected              bool
	time                  time.Time
	sources               func() []gen.ConfigRef
}

func fromVerdict(v server.Verdict) report {
	return report{proxyID: v.ProxyID, typeURL: v.TypeURL, err: v.Error, rejected: v.Rejected, time: v.Time, sources: v.Sources}
}

// rejection is what was last reported rejected of one config.
type rejection struct {
	ref     gen.ConfigRef
	written time.Time
}

var _ server.Observer = (*Reporter)(nil)

// New returns a Reporter writing through w; with w nil (no cluster) it
// only logs.
func New(opts Options, w Writer, log *slog.Logger, reg prometheus.Registerer) (*Reporter, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("status metrics: %w", err)
	}
	return &Reporter{
		opts: opts, w: w, log: log, m: m, queue: make(chan report, opts.QueueSize),
		rejected: map[model.Key]*rejection{},
	}, nil
}

// Rejected queues a NACK; it never blocks.
func (r *Reporter) Rejected(v server.Verdict) { r.enqueue(fromVerdict(v)) }

// Accepted queues an ACK; it never blocks.
func (r *Reporter) Accepted(v server.Verdict) { r.enqueue(fromVerdict(v)) }

// WantsAccepts reports whether some config is reported rejected: only then
// can an ACK clear something.
func (r *Reporter) WantsAccepts() bool { return r.active.Load() && r.outstanding.Load() > 0 }

func (r *Reporter) enqueue(v report) {
	if !r.active.Load() {
		return
	}
	select {
	case r.queue <- v:
		r.m.verdicts.WithLabelValues("queued").Inc()
	default:
		r.m.verdicts.WithLabelValues("dropped").Inc()
	}
}

// Start reports verdicts until ctx ends. Run it on the leader only. What
// was reported is forgotten when it returns: a new leader starts afresh.
func (r *Reporter) Start(ctx context.Context) error {
	r.active.Store(true)
	defer func() {
		r.active.Store(false)
		r.rejected = map[model.Key]*rejection{}
		r.outstanding.Store(0)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case v := <-r.queue:
			r.handle(ctx, v)
		}
	}
}

func (r *Reporter) handle(ctx context.Context, v report) {
	for _, ref := range v.sources() {
		if v.rejected {
			r.reject(ctx, v, ref)
		} else {
			r.accept(ctx, v, ref)
		}
	}
	r.outstanding.Store(int64(len(r.rejected)))
}

func (r *Reporter) reject(ctx context.Context, v report, ref gen.ConfigRef) {
	prev := r.rejected[ref.Key]
	if prev != nil && !newer(ref, prev.ref) && v.time.Sub(prev.written) < r.opts.Interval {
		r.m.writes.WithLabelValues("True", "suppressed").Inc()
		return
	}
	msg := truncate(fmt.Sprintf("proxy %s rejected %s configuration built from generation %d: %s",
		v.proxyID, gen.ShortType(v.typeURL), ref.Generation, v.err))
	c := Condition{Status: "True", Reason: ReasonRejected, Message: msg, ObservedGeneration: ref.Generation, Time: v.time}
	if r.write(ctx, ref, c, msg) {
		r.rejected[ref.Key] = &rejection{ref: ref, written: v.time}
	}
}

func (r *Reporter) accept(ctx context.Context, v report, ref gen.ConfigRef) {
	prev := r.rejected[ref.Key]
	if prev == nil || !newer(ref, prev.ref) {
		return
	}
	msg := truncate(fmt.Sprintf("proxy %s accepted %s configuration built from generation %d",
		v.proxyID, gen.ShortType(v.typeURL), ref.Generation))
	c := Condition{Status: "False", Reason: ReasonAccepted, Message: msg, ObservedGeneration: ref.Generation, Time: v.time}
	if r.write(ctx, ref, c, "") {
		delete(r.rejected, ref.Key)
	}
}

// write reports c on ref; it says whether that is done (or, without a
// cluster, logged).
func (r *Reporter) write(ctx context.Context, ref gen.ConfigRef, c Condition, event string) bool {
	log := r.log.With("resource", ref.Key.String(), "generation", ref.Generation, "condition", ConditionType,
		"status", c.Status, "reason", c.Reason, "message", c.Message)
	if r.w == nil {
		log.Warn("proxy verdict on Istio resource (no cluster: not written)")
		r.m.writes.WithLabelValues(c.Status, "logged").Inc()
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, r.opts.WriteTimeout)
	defer cancel()
	if err := r.w.Write(wctx, ref, c, event); err != nil {
		log.Warn("could not report proxy verdict on Istio resource", "error", err)
		if errors.Is(err, ErrEvent) {
			// The condition is written; only the Event is missing.
			r.m.writes.WithLabelValues(c.Status, "event_failed").Inc()
			return true
		}
		r.m.writes.WithLabelValues(c.Status, "failed").Inc()
		return false
	}
	log.Info("reported proxy verdict on Istio resource")
	r.m.writes.WithLabelValues(c.Status, "written").Inc()
	return true
}

// newer reports whether a is a later version of the config than b: a
// higher generation, or without generations (file mode) another
// resourceVersion.
func newer(a, b gen.ConfigRef) bool {
	if a.Generation > 0 && b.Generation > 0 {
		return a.Generation > b.Generation
	}
	return a.ResourceVersion != b.ResourceVersion
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	s = s[:maxMessage-3]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}
