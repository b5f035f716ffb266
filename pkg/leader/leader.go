// Package leader runs the process's long-running components, some of them
// only while this replica leads.
//
// In: components, each a Start(ctx) function that says whether it needs
// the leader. Out: every component running; the leader-only ones started
// when this replica acquires the Lease and cancelled when it loses it.
// With a cluster, leadership is a coordination.k8s.io Lease held through
// client-go's leaderelection; without one (file mode) this process leads.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Options configure leader election.
type Options struct {
	// LeaseDuration is how long a Lease holds without renewal.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader tries to renew before it gives up.
	RenewDeadline time.Duration
	// RetryPeriod is how often candidates try to acquire or renew.
	RetryPeriod time.Duration
}

// DefaultOptions are client-go's usual values, shortened a little so a
// standby takes over quickly.
func DefaultOptions() Options {
	return Options{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.LeaseDuration, "leader-lease-duration", o.LeaseDuration, "How long the leader Lease lasts without renewal; a standby replica takes over within it when the leader dies.")
	fs.DurationVar(&o.RenewDeadline, "leader-renew-deadline", o.RenewDeadline, "How long the leader keeps trying to renew its Lease before it steps down.")
	fs.DurationVar(&o.RetryPeriod, "leader-retry-period", o.RetryPeriod, "How often replicas try to acquire or renew the leader Lease.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.RetryPeriod <= 0 || o.RenewDeadline <= o.RetryPeriod || o.LeaseDuration <= o.RenewDeadline {
		return fmt.Errorf("leader election: need 0 < --leader-retry-period (%s) < --leader-renew-deadline (%s) < --leader-lease-duration (%s)",
			o.RetryPeriod, o.RenewDeadline, o.LeaseDuration)
	}
	return nil
}

// LeaseName is the Lease's name for a revision: discovery-<revision>, or
// discovery-default without one.
func LeaseName(revision string) string {
	if revision == "" {
		revision = "default"
	}
	return "discovery-" + revision
}

// component is one long-running part.
type component struct {
	name        string
	needsLeader bool
	start       func(ctx context.Context) error
}

// Runner runs components. Build it with NewRunner, Add components, then
// Start it once.
type Runner struct {
	opts      Options
	client    kubernetes.Interface // nil: no cluster, this process leads
	namespace string
	lease     string
	identity  string
	log       *slog.Logger

	components []component
	leading    atomic.Bool
	onChange   []func(leading bool)
}

// NewRunner returns a Runner. With a nil client this process always leads.
func NewRunner(opts Options, client kubernetes.Interface, namespace, leaseName, identity string, log *slog.Logger) *Runner {
	return &Runner{opts: opts, client: client, namespace: namespace, lease: leaseName, identity: identity, log: log}
}

// Add registers a component. Those that need the leader run only while
// this replica leads; they are started again each time it regains the lead.
func (r *Runner) Add(name string, needsLeader bool, start func(ctx context.Context) error) {
	r.components = append(r.components, component{name: name, needsLeader: needsLeader, start: start})
}

// OnLeaderChange registers fn, called with true when this replica starts
// leading and false when it stops. Call before Start.
func (r *Runner) OnLeaderChange(fn func(leading bool)) { r.onChange = append(r.onChange, fn) }

// IsLeader reports whether this replica leads now.
func (r *Runner) IsLeader() bool { return r.leading.Load() }

// Identity is this replica's name in the Lease.
func (r *Runner) Identity() string { return r.identity }

// Start runs every component until ctx ends or a component that runs
// regardless of leadership fails; it then cancels the others, waits for
// them, and returns the first error (nil when ctx ended).
func (r *Runner) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var leaderOnly []component
	for _, c := range r.components {
		if c.needsLeader {
			leaderOnly = append(leaderOnly, c)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.start(ctx); err != nil && ctx.Err() == nil {
				cancel(fmt.Errorf("%s: %w", c.name, err))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.lead(ctx, leaderOnly)
	}()
	<-ctx.Done()
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// lead runs the leader-only components while this replica leads.
func (r *Runner) lead(ctx context.Context, comps []component) {
	run := func(ctx context.Context) {
		r.setLeading(true)
		defer r.setLeading(false)
		var wg sync.WaitGroup
		for _, c := range comps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.start(ctx); err != nil && ctx.Err() == nil {
					// A leader-only job failing must not take the server
					// down: it is logged and runs again at the next lead.
					r.log.Error("leader-only component failed", "component", c.name, "err", err)
				}
			}()
		}
		<-ctx.Done()
		wg.Wait()
	}
	if r.client == nil {
		r.log.Info("no cluster: this process leads")
		run(ctx)
		return
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: r.namespace, Name: r.lease},
		Client:     r.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: r.identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   r.opts.LeaseDuration,
			RenewDeadline:   r.opts.RenewDeadline,
			RetryPeriod:     r.opts.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            r.lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: run,
				OnStoppedLeading: func() {},
				OnNewLeader: func(id string) {
					r.log.Info("leader elected", "lease", r.namespace+"/"+r.lease, "leader", id, "self", id == r.identity)
				},
			},
		})
		if err != nil {
			r.log.Error("leader election misconfigured", "err", err)
			return
		}
		// Run returns when leadership is lost or ctx ends; then try again.
		le.Run(ctx)
	}
}

func (r *Runner) setLeading(v bool) {
	if r.leading.Swap(v) == v {
		return
	}
	if v {
		r.log.Info("started leading", "lease", r.namespace+"/"+r.lease, "identity", r.identity)
	} else {
		r.log.Info("stopped leading", "lease", r.namespace+"/"+r.lease, "identity", r.identity)
	}
	for _, fn := range r.onChange {
		fn(v)
	}
}
