package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/credentials"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/push"
	"github.com/meshplane/discovery/pkg/xds/streamauth"
)

// World is where the server reads configuration from; *model.Store is it.
type World interface {
	// World returns the current World.
	World() *model.World
	// Subscribe registers fn for every Update; fn must return quickly.
	Subscribe(fn func(*model.Update))
}

var _ World = (*model.Store)(nil)

// Server serves xDS to proxies and pushes changes to them.
type Server struct {
	opts  Options
	world World
	log   *slog.Logger
	m     *metrics
	gen   *gen.Generator
	// warming admits new streams (warming.go); nil: unbounded.
	warming *warming
	// observer learns of ACKs and NACKs (verdict.go); nil for none.
	observer Observer
	// registrar learns of streams that connect, report health and end
	// (register.go); nil for none.
	registrar Registrar

	// xds serves state-of-the-world streams; delta streams are served by
	// serveDelta (deltastream.go) and their subscriptions share names
	// through names (subscription.go). xdsCtx ends both at shutdown.
	xds       serverv3.Server
	xdsCtx    context.Context
	xdsCancel context.CancelFunc
	names     *namePool
	// wholeSent counts the delta responses that carried a class's set
	// whole, encoded once (delta_whole.go): for tests.
	wholeSent atomic.Int64
	recent    recentWholes

	debouncer *push.Debouncer
	queue     *push.Queue[*conn, *pushItem]
	conns     sync.Map // streamKey -> *conn
	reqs      sync.Map // request pointer -> *conn, between OnStreamRequest and CreateWatch
	classes   push.Classes
	history   *history
	waves     *waves                 // push waves (canary.go)
	streams   streamCount            // open streams, against Options.MaxStreams (limits.go)
	refusals  *streamauth.RefusalLog // log lines of refused streams, bounded

	// Istio's debug types (debugxds.go): this replica's identifier, and
	// the /debug pages RegisterDebug was given.
	controlPlane *corev3.ControlPlane
	debugMux     *http.ServeMux

	// Gateway credentials (sds.go); nil without a cluster.
	creds       credentials.Reader
	credsDenied *prometheus.CounterVec
}

// New returns a Server reading from world. It subscribes to world's
// updates at once; pushes start with Start.
func New(opts Options, world World, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.PushStatusSize <= 0 {
		opts.PushStatusSize = DefaultOptions().PushStatusSize
	}
	g, err := gen.New(gen.Options{Log: log, TrustDomain: opts.TrustDomain, TraceSampling: opts.TraceSampling, Credentials: opts.Credentials != nil, ListenersPerAddress: opts.ListenersPerAddress,
		// push.Classes serves every proxy of a shared class a variant.
		SharedTags: true,
	})
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, world: world, log: log, m: newMetrics(reg), gen: g, refusals: streamauth.NewRefusalLog(log)}
	if opts.Credentials != nil {
		if err := s.useCredentials(opts.Credentials, reg); err != nil {
			return nil, err
		}
	}
	if err = s.gen.RegisterMetrics(reg); err != nil {
		return nil, fmt.Errorf("xds metrics: %w", err)
	}
	if s.controlPlane, err = controlPlaneID(opts.Instance); err != nil {
		return nil, err
	}
	s.history = newHistory(opts.PushStatusSize)
	s.waves = newWaves(s)
	ctx, cancel := context.WithCancel(context.Background())
	s.xdsCtx, s.xdsCancel = ctx, cancel
	s.names = newNamePool()
	s.xds = serverv3.NewServer(ctx, watcher{s}, callbacks{s}, sotwv3.WithOrderedADS(),
		// An empty Route or Endpoint request names nothing; only Listener
		// and Cluster requests may be Envoy's legacy wildcard.
		sotwv3.DeactivateLegacyWildcardForTypes([]string{gen.RouteType, gen.EndpointType, gen.SecretType}))
	s.debouncer = push.NewDebouncer(opts.DebounceAfter, opts.DebounceMax, s.onPush)
	s.debouncer.SetEndpointQuiet(opts.DebounceEndpoints)
	s.debouncer.SetConfigQuiet(opts.DebounceConfig)
	s.warming = newWarming(opts.WarmingStreams, opts.WarmingTimeout)
	s.queue = push.NewQueue(opts.PushConcurrency, mergeItems, s.work)
	if opts.IdleGC {
		ig := newIdleGC(ctx, s.queue.Quiet)
		s.queue.OnIdle(ig.drained)
		if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "discovery_xds_idle_collections_total",
			Help: "Garbage collections run because the push queue drained with the heap past half its room to the next collection (--xds-idle-gc).",
		}, func() float64 { return float64(ig.runs.Load()) })); err != nil {
			return nil, fmt.Errorf("xds metrics: %w", err)
		}
	}
	world.Subscribe(s.debouncer.Enqueue)
	s.m.services.Set(float64(world.World().ServiceCount()))
	return s, nil
}

// Generator is the server's generator, for the parts that report what it
// did (the status writer reads its EnvoyFilter refusals).
func (s *Server) Generator() *gen.Generator { return s.gen }

// Register adds the AggregatedDiscoveryService and the per-type CDS, EDS,
// LDS and RDS services to gs. Call it for every gRPC server that serves
// xDS (plaintext and TLS).
func (s *Server) Register(gs *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, adsService{s})
	clusterservice.RegisterClusterDiscoveryServiceServer(gs, typeService{s})
	endpointservice.RegisterEndpointDiscoveryServiceServer(gs, typeService{s})
	listenerservice.RegisterListenerDiscoveryServiceServer(gs, typeService{s})
	routeservice.RegisterRouteDiscoveryServiceServer(gs, typeService{s})
}

// Start runs the push pipeline until ctx ends, then ends every stream.
func (s *Server) Start(ctx context.Context) error {
	defer s.xdsCancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = s.debouncer.Start(ctx)
	}()
	go func() {
		defer wg.Done()
		_ = s.queue.Start(ctx)
	}()
	wg.Wait()
	return nil
}

// streamCtl lets the server end a stream it judges stuck.
type streamCtl struct {
	once   sync.Once
	done   chan struct{}
	reason string
}

type ctlKey struct{}

func newStreamCtl() *streamCtl { return &streamCtl{done: make(chan struct{})} }

func (c *streamCtl) kill(reason string) {
	c.once.Do(func() {
		c.reason = reason
		close(c.done)
	})
}

// guard runs a go-control-plane stream handler and returns early, which
// makes gRPC end the stream, when the stream is killed. go-control-plane's
// loop does not watch the streamCtl, so it runs in a goroutine of its own;
// delta streams, served by this package's loop (deltastream.go), watch it
// themselves and need no second goroutine (guardedDelta).
func (s *Server) guard(ctx context.Context, run func(ctx context.Context, ctl *streamCtl) error) error {
	ctl := newStreamCtl()
	sctx := context.WithValue(ctx, ctlKey{}, ctl)
	errc := make(chan error, 1)
	go func() { errc <- run(sctx, ctl) }()
	select {
	case err := <-errc:
		return err
	case <-ctl.done:
		return status.Error(codes.Unavailable, ctl.reason)
	}
}

// guardedStream gives go-control-plane a stream whose context carries the
// streamCtl and whose Send gives up after the send timeout.
type guardedStream[Req, Resp any] struct {
	grpc.BidiStreamingServer[Req, Resp]
	ctx     context.Context
	ctl     *streamCtl
	s       *Server
	timeout time.Duration
}

func (g *guardedStream[Req, Resp]) Context() context.Context { return g.ctx }

func (g *guardedStream[Req, Resp]) Send(m *Resp) error { return g.SendMsg(m) }

// SendMsg sends m, a *Resp or a message the codec writes as one
// (deltaWire), giving up after the send timeout or when the stream is
// killed.
func (g *guardedStream[Req, Resp]) SendMsg(m any) error {
	done := make(chan error, 1)
	go func() { done <- g.BidiStreamingServer.SendMsg(m) }()
	var timeout <-chan time.Time
	if g.timeout > 0 {
		t := time.NewTimer(g.timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case err := <-done:
		return err
	case <-g.ctl.done:
		// A stream killed while it sends (drained, or its proxy too slow
		// to acknowledge) ends now; the send gives up when gRPC ends the
		// stream.
		return status.Error(codes.Unavailable, g.ctl.reason)
	case <-timeout:
		g.s.log.Warn("closing xDS stream: the proxy did not read a response in time", "timeout", g.timeout.String())
		g.s.m.streamsClosed.WithLabelValues("send_timeout").Inc()
		g.ctl.kill("the proxy did not read configuration in time")
		return status.Error(codes.DeadlineExceeded, "send timed out")
	}
}

func guarded[Req, Resp any](s *Server, st grpc.BidiStreamingServer[Req, Resp], run func(grpc.BidiStreamingServer[Req, Resp]) error) error {
	if err := s.admit(); err != nil {
		return err
	}
	defer s.release()
	return s.guard(st.Context(), func(ctx context.Context, ctl *streamCtl) error {
		return run(&guardedStream[Req, Resp]{BidiStreamingServer: st, ctx: ctx, ctl: ctl, s: s, timeout: s.opts.SendTimeout})
	})
}

// guardedDelta serves a delta stream in gRPC's handler goroutine: its loop
// returns when the stream is killed, as guard would (one goroutine fewer
// per proxy than guard's).
func (s *Server) guardedDelta(st deltaStream, typeURL string) error {
	if err := s.admit(); err != nil {
		return err
	}
	defer s.release()
	ctl := newStreamCtl()
	ctx := context.WithValue(st.Context(), ctlKey{}, ctl)
	g := &guardedStream[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]{BidiStreamingServer: st, ctx: ctx, ctl: ctl, s: s, timeout: s.opts.SendTimeout}
	return s.serveDelta(g, typeURL, ctl)
}

type (
	sotwStream  = grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	deltaStream = grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
)

type adsService struct{ s *Server }

func (a adsService) StreamAggregatedResources(st sotwStream) error {
	return guarded(a.s, st, a.s.xds.StreamAggregatedResources)
}

func (a adsService) DeltaAggregatedResources(st deltaStream) error {
	return a.s.guardedDelta(st, "")
}

// typeService serves the per-type discovery services.
type typeService struct{ s *Server }

func (t typeService) StreamClusters(st sotwStream) error {
	return guarded(t.s, st, t.s.xds.StreamClusters)
}

func (t typeService) DeltaClusters(st deltaStream) error {
	return t.s.guardedDelta(st, gen.ClusterType)
}

func (t typeService) StreamEndpoints(st sotwStream) error {
	return guarded(t.s, st, t.s.xds.StreamEndpoints)
}

func (t typeService) DeltaEndpoints(st deltaStream) error {
	return t.s.guardedDelta(st, gen.EndpointType)
}

func (t typeService) StreamListeners(st sotwStream) error {
	return guarded(t.s, st, t.s.xds.StreamListeners)
}

func (t typeService) DeltaListeners(st deltaStream) error {
	return t.s.guardedDelta(st, gen.ListenerType)
}

func (t typeService) StreamRoutes(st sotwStream) error {
	return guarded(t.s, st, t.s.xds.StreamRoutes)
}

func (t typeService) DeltaRoutes(st deltaStream) error {
	return t.s.guardedDelta(st, gen.RouteType)
}

func (t typeService) FetchClusters(ctx context.Context, r *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	return nil, status.Error(codes.Unimplemented, errNoFetch.Error())
}

func (t typeService) FetchEndpoints(ctx context.Context, r *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	return nil, status.Error(codes.Unimplemented, errNoFetch.Error())
}

func (t typeService) FetchListeners(ctx context.Context, r *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	return nil, status.Error(codes.Unimplemented, errNoFetch.Error())
}

func (t typeService) FetchRoutes(ctx context.Context, r *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	return nil, status.Error(codes.Unimplemented, errNoFetch.Error())
}
