package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshplane/discovery/pkg/config"
	"github.com/meshplane/discovery/pkg/model"
)

// maxBatch caps the events of one Sink.Apply, so that one huge relist
// does not hold the Store's lock for long.
const maxBatch = 4096

// Source is the Kubernetes configuration source.
type Source struct {
	clients  Clients
	opts     Options
	log      *slog.Logger
	metrics  *metrics
	queue    *batchQueue
	crdKinds map[string]model.Kind

	mu         sync.Mutex
	ctx        context.Context // Start's, for informers started later
	started    bool
	wg         sync.WaitGroup
	crdReg     cache.ResourceEventHandlerRegistration
	watchers   map[model.Kind]*watcher
	syncTarget uint64 // events pushed when every informer had synced
	targetSet  bool
	synced     atomic.Bool
}

var _ config.Source = (*Source)(nil)

// New returns a source that reads the API server cfg points at. Core
// Kubernetes kinds are read as protobuf, Istio's, the Gateway API's and
// CRDs as JSON.
func New(cfg *rest.Config, opts Options, log *slog.Logger, reg prometheus.Registerer) (*Source, error) {
	c, err := NewClients(cfg)
	if err != nil {
		return nil, err
	}
	return NewForClients(c, opts, log, reg)
}

// NewClients returns the clients New reads through: core Kubernetes kinds
// as protobuf, Istio's, the Gateway API's and CRDs as JSON. Shared is
// left for the caller. Their reads wait for an API server that cannot be
// reached (await.go).
func NewClients(cfg *rest.Config) (Clients, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(awaitAPIServer)
	kcfg := rest.CopyConfig(cfg)
	kcfg.ContentType = "application/vnd.kubernetes.protobuf"
	kcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kc, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		return Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	ic, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("istio client: %w", err)
	}
	cc, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("apiextensions client: %w", err)
	}
	gc, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("gateway API client: %w", err)
	}
	return Clients{Kube: kc, Istio: ic, CRDs: cc, Gateway: gc}, nil
}

// NewForClients returns a source that reads through the given clients.
func NewForClients(c Clients, opts Options, log *slog.Logger, reg prometheus.Registerer) (*Source, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if c.Kube == nil || c.Istio == nil || c.CRDs == nil {
		return nil, errors.New("kube source: every client (Kube, Istio, CRDs) is required")
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Source{
		clients:  c,
		opts:     opts,
		log:      log.With("source", sourceLabel),
		metrics:  m,
		queue:    newBatchQueue(maxBatch),
		crdKinds: crdKinds(c.Gateway != nil),
		watchers: map[model.Kind]*watcher{},
	}
	if c.Shared != nil {
		if err := s.prepareShared(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Name identifies the source.
func (s *Source) Name() string { return sourceLabel }

// Start watches the API server and reports to sink until ctx ends. It
// returns an error only if called twice or if an informer cannot be set up.
func (s *Source) Start(ctx context.Context, sink config.Sink) error {
	if err := s.startInformers(ctx); err != nil {
		return err
	}
	s.wg.Go(func() { s.queue.run(ctx, func(batch []model.Event) { s.apply(sink, batch) }) })
	s.wg.Go(func() { s.logWhenSynced(ctx) })
	<-ctx.Done()
	s.wg.Wait()
	return nil
}

func (s *Source) startInformers(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("kube source already started")
	}
	s.started = true
	s.ctx = ctx
	crdInf, crdReg, err := s.newCRDInformer()
	if err != nil {
		return fmt.Errorf("CRD informer: %w", err)
	}
	s.crdReg = crdReg
	kinds := model.KubeKinds
	if s.opts.MeshConfigMap != "" {
		kinds = append(slices.Clone(kinds), model.KindConfigMap)
	}
	if s.clients.Gateway != nil {
		// BackendTLSPolicy's CA ConfigMaps: a core kind, always there.
		kinds = append(slices.Clone(kinds), model.KindCAConfigMap)
	}
	for _, k := range kinds {
		w, err := newWatcher(s, k)
		if err != nil {
			return fmt.Errorf("%s informer: %w", k, err)
		}
		s.watchers[k] = w
	}
	for _, k := range kinds {
		s.watchers[k].start(ctx, &s.wg)
	}
	s.wg.Go(func() { crdInf.RunWithContext(ctx) })
	return nil
}

func (s *Source) apply(sink config.Sink, batch []model.Event) {
	s.metrics.batchSize.Observe(float64(len(batch)))
	if _, err := sink.Apply(batch...); err != nil {
		n := 1
		var joined interface{ Unwrap() []error }
		if errors.As(err, &joined) {
			n = len(joined.Unwrap())
		}
		s.metrics.applyErrors.Add(float64(n))
		s.log.Error("model rejected events", "rejected", n, "batch", len(batch), "err", err)
	}
}

// HasSynced reports whether the initial state has reached the Sink: the
// CRD list has been seen, and every core kind and every Istio kind whose
// CRD was usable then has been listed and applied. Once true it stays
// true: a CRD installed later, or an outage, does not make the source
// unready again.
func (s *Source) HasSynced() bool {
	if s.synced.Load() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.targetSet {
		if !s.started || !s.crdReg.HasSynced() {
			return false
		}
		for _, w := range s.watchers {
			if !w.hasSynced() {
				return false
			}
		}
		// Every initial event has been pushed; wait until it is applied.
		s.syncTarget, s.targetSet = s.queue.pushedCount(), true
	}
	if s.queue.appliedCount() < s.syncTarget {
		return false
	}
	s.synced.Store(true)
	return true
}

// Kinds returns the kinds watched now, sorted.
func (s *Source) Kinds() []model.Kind {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]model.Kind, 0, len(s.watchers))
	for k := range s.watchers {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (s *Source) logWhenSynced(ctx context.Context) {
	start := time.Now()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return s.HasSynced(), nil
	})
	if err != nil {
		return
	}
	s.log.Info("initial state synced", "took", time.Since(start).Round(time.Millisecond),
		"events", s.queue.appliedCount(), "kinds", s.Kinds())
}
