package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/config"
	"github.com/meshplane/discovery/pkg/config/meshconfig"
	gwcreds "github.com/meshplane/discovery/pkg/credentials"
	"github.com/meshplane/discovery/pkg/jwks"
	"github.com/meshplane/discovery/pkg/leader"
	"github.com/meshplane/discovery/pkg/mesh"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/monitor"
	"github.com/meshplane/discovery/pkg/status"
	"github.com/meshplane/discovery/pkg/webhook/inject"
	webhookserver "github.com/meshplane/discovery/pkg/webhook/server"
	"github.com/meshplane/discovery/pkg/webhook/validate"
	xdsserver "github.com/meshplane/discovery/pkg/xds/server"
	"github.com/meshplane/discovery/pkg/xds/streamauth"
)

// run wires the parts together and serves until ctx ends, then drains.
func (o *serveOptions) run(ctx context.Context) error {
	log := o.logger()
	// client-go logs through klog: send it to the same structured log.
	klog.SetSlogLogger(log.With("component", "client-go"))
	reg := prometheus.NewRegistry()
	cfg, client, err := o.cluster(log)
	if err != nil {
		return err
	}
	initial, err := o.initialMesh(ctx, client, log)
	if err != nil {
		return err
	}
	p, err := o.build(ctx, cfg, client, initial, log, reg)
	if err != nil {
		return err
	}
	// A signal ends ctx; the runner's context ends only once the streams
	// have been drained.
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	go func() {
		select {
		case <-runCtx.Done():
		case <-ctx.Done():
			p.drain(runCtx, o.drainPeriod, log)
			cancelRun()
		}
	}()
	log.Info("discovery starting", "version", currentVersion().Version, "revision", o.revision, "trustDomain", o.trustDomain)
	err = p.runner.Start(runCtx)
	log.Info("discovery stopped", "err", err)
	return err
}

// cluster finds the API server, if any. Without one, the CA lives in
// --ca-dir or its default.
func (o *serveOptions) cluster(log *slog.Logger) (*rest.Config, kubernetes.Interface, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, nil, err
	}
	client, err := newKubeClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	if client == nil && o.ca.Dir == "" {
		if o.ca.Dir, err = defaultCADir(); err != nil {
			return nil, nil, err
		}
		log.Info("file mode: keeping the CA in the default directory", "dir", o.ca.Dir)
	}
	if cfg != nil {
		log.Info("reading the cluster", "host", cfg.Host, "namespace", o.namespace)
	}
	return cfg, client, nil
}

// initialMesh reads the MeshConfig before anything starts, from where it
// will be watched, and decides the trust domain with it: --trust-domain
// when given on the command line, else the MeshConfig's trustDomain. The
// CA signs for that domain until the next start (as istiod's CA reads
// it once); a MeshConfig that later names another is reported.
func (o *serveOptions) initialMesh(ctx context.Context, client kubernetes.Interface, log *slog.Logger) (meshconfig.Initial, error) {
	var in meshconfig.Initial
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 6, Cap: 10 * time.Second},
		func(ctx context.Context) (bool, error) {
			var err error
			if in, err = meshconfig.ReadInitial(ctx, o.mesh, client, o.file.Dir); err != nil {
				log.Warn("reading the MeshConfig at start-up; retrying", "error", err)
				return false, nil
			}
			return true, nil
		})
	if err != nil {
		return in, fmt.Errorf("the MeshConfig could not be read at start-up (%s): %w", in.Source, err)
	}
	cfg := mesh.Default()
	if in.Found {
		if c, err := mesh.Parse(in.Text); err == nil {
			cfg = c
		} else {
			// The watcher refuses it again, with its log line and metric.
			in.Found = false
		}
	}
	if !o.trustDomainFlag {
		o.setTrustDomain(cfg.TrustDomain())
	}
	log.Info("MeshConfig at start-up", "source", in.Source, "found", in.Found, "trustDomain", o.trustDomain,
		"trustDomainFrom", map[bool]string{true: "--trust-domain", false: "MeshConfig"}[o.trustDomainFlag])
	return in, nil
}

// parts are the running process: its components and what drains it.
type parts struct {
	runner   *leader.Runner
	xds      *xdsserver.Server
	auditor  *status.Auditor
	guard    *streamauth.Guard
	draining atomic.Bool
	// grpcServers are the xDS and CA servers.
	grpcServers []*grpc.Server
}

// drain refuses new xDS streams and closes the open ones over period.
// The gRPC servers stop at once what their clients can move elsewhere:
// they close their listeners and send GOAWAY on every connection
// (GracefulStop), so a proxy whose stream is closed opens the next one
// on a new connection, to another replica, instead of having it refused
// on this one until the drain ends; the open streams stay until drained.
func (p *parts) drain(ctx context.Context, period time.Duration, log *slog.Logger) {
	p.draining.Store(true)
	p.guard.Drain()
	for _, s := range p.grpcServers {
		go s.GracefulStop()
	}
	log.Info("shutting down: draining xDS streams", "period", period)
	n := p.xds.Drain(ctx, period)
	log.Info("xDS streams drained", "streams", n)
}

// build constructs every part and registers it with the leader runner.
func (o *serveOptions) build(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, initial meshconfig.Initial, log *slog.Logger, reg *prometheus.Registry) (*parts, error) {
	store := model.NewStore(model.StoreOptions{DomainSuffix: o.domainSuffix})
	// Every source hands its events to the MeshConfig watcher, which
	// turns the mesh's ConfigMap into the MeshConfig for the Store.
	meshWatcher, err := meshconfig.New(o.mesh, store, log, reg)
	if err != nil {
		return nil, err
	}
	if initial.Found {
		if err := meshWatcher.Seed(initial.Text, initial.Source+", read at start-up"); err != nil {
			return nil, err
		}
	}
	clients, err := o.kubeClients(cfg)
	if err != nil {
		return nil, err
	}
	// Built before anything can start the shared factory (kube.Clients).
	sources, fileSource, err := o.sources(clients, log, reg)
	if err != nil {
		return nil, err
	}
	if o.mesh.File != "" {
		ms, err := meshconfig.NewFileSource(meshWatcher)
		if err != nil {
			return nil, err
		}
		sources = append(sources, ms)
	}
	mon := monitor.New(o.monitor, reg, log)
	mon.Handle("/version", monitor.VersionHandler(currentVersion().istiodString()))
	mon.HandleDebug("registryz", monitor.RegistryzHandler(store.World))
	mon.HandleDebug("configz", monitor.ConfigzHandler(store.World, status.ConfigzNote, status.RefusedConfigzNote))
	mon.HandleDebug("meshz", meshWatcher.Handler())
	if fileSource != nil {
		fileSource.RegisterDebug(mon.Mux())
	}
	authority, err := ca.New(ctx, o.ca, client, log, reg)
	if err != nil {
		return nil, fmt.Errorf("start CA: %w", err)
	}
	authority.RegisterDebug(mon.Mux())
	p := &parts{guard: streamauth.New(authority, log.With("component", "xds-auth"), reg)}
	xo := o.xds
	var creds *gwcreds.Kube
	if client != nil {
		if creds, err = gatewayCredentials(ctx, client, log, reg); err != nil {
			return nil, err
		}
		if creds != nil {
			xo.Credentials = creds
		}
	}
	// The xDS server's streams live until its Start returns, not for this
	// start-up context: New makes its own, which Start cancels.
	if p.xds, err = xdsserver.New(xo, store, log.With("component", "xds"), reg); err != nil { //nolint:contextcheck // see above
		return nil, err
	}
	p.xds.RegisterDebug(mon.Mux())
	webhooks, injector, err := o.webhooks(ctx, authority, client, reg, log, mon, store)
	if err != nil {
		return nil, err
	}
	if clients != nil {
		namespaces := clients.Shared.Core().V1().Namespaces()
		injector.SetNamespaceLister(namespaces.Lister(), namespaces.Informer().HasSynced)
	}
	plain, secure := o.grpcServers(authority.ServerTLSConfig(), p.guard) //nolint:contextcheck // gRPC interceptors take the stream's context
	authority.Register(secure)
	p.xds.Register(secure)

	p.runner = leader.NewRunner(o.leader, client, o.namespace, leader.LeaseName(o.revision), identity(), log.With("component", "leader"))
	p.runner.Add("monitor", false, mon.Start)
	if clients != nil {
		p.runner.Add("shared informers", false, runSharedInformers(clients.Shared))
	}
	for _, src := range sources {
		mon.AddReadyCheck("source "+src.Name(), synced(src))
		p.runner.Add("source "+src.Name(), false, func(ctx context.Context) error { return src.Start(ctx, meshWatcher) })
	}
	mon.AddReadyCheck("shutdown", func() error {
		if p.draining.Load() {
			return errors.New("draining")
		}
		return nil
	})
	p.runner.Add("ca", false, authority.Start)
	p.runner.Add("xds", false, p.xds.Start)
	// Every replica fetches the key sets its proxies need (kube and file
	// mode alike): they are a model input (pkg/jwks).
	resolver, err := jwks.New(o.jwks, store, log.With("component", "jwks"), reg)
	if err != nil {
		return nil, err
	}
	p.runner.Add("jwks resolver", false, resolver.Start)
	if err := statusReporter(o.status, cfg, client, p, store, log, reg); err != nil {
		return nil, err
	}
	if err := autoRegistration(o.autoreg, cfg, p, store, log, reg); err != nil {
		return nil, err
	}
	if creds != nil {
		runCredentials(creds, p, store, mon)
	}
	if client != nil && cfg != nil {
		if err := gatewayDeployment(o, cfg, client, injector, p, log, reg); err != nil {
			return nil, err
		}
	}
	for _, c := range webhooks {
		p.runner.Add(c.name, c.needsLeader, c.start)
	}
	if clients != nil {
		publisher, err := authority.NewRootPublisher(clients.Shared.Core().V1().Namespaces().Informer())
		if err != nil {
			return nil, err
		}
		p.runner.Add("root-cert publisher", true, publisher.Start)
	}
	if plain != nil {
		p.xds.Register(plain)
		p.runner.Add("grpc", false, serveGRPC("grpc", o.grpcAddr, plain, log))
		p.grpcServers = append(p.grpcServers, plain)
	}
	p.runner.Add("secure grpc", false, serveGRPC("secure grpc", o.secureAddr, secure, log))
	p.grpcServers = append(p.grpcServers, secure)
	return p, nil
}

// proxyConfigs are the ProxyConfig resources of w, for the injector.
func proxyConfigs(w *model.World) []*networkingv1beta1.ProxyConfig {
	cs := w.Configs(model.KindProxyConfig)
	out := make([]*networkingv1beta1.ProxyConfig, 0, len(cs))
	for _, c := range cs {
		if pc, ok := c.Object.(*networkingv1beta1.ProxyConfig); ok {
			out = append(out, pc)
		}
	}
	return out
}

// component is a long-running part for the leader.Runner.
type component struct {
	name        string
	needsLeader bool
	start       func(ctx context.Context) error
}

// webhooks builds the injection and validation webhooks on their HTTPS
// server and, with a cluster, the leader's caBundle patcher.
func (o *serveOptions) webhooks(ctx context.Context, authority *ca.CA, client kubernetes.Interface, reg prometheus.Registerer, log *slog.Logger, mon *monitor.Server, store *model.Store) ([]component, *inject.Injector, error) {
	injector, err := inject.New(o.inject, client, reg, log)
	if err != nil {
		return nil, nil, err
	}
	injector.SetMesh(func() *meshv1alpha1.MeshConfig { return store.World().Mesh().Proto() })
	injector.SetProxyConfigs(func() []*networkingv1beta1.ProxyConfig { return proxyConfigs(store.World()) })
	injector.RegisterDebug(mon.Mux())
	mon.AddReadyCheck("injection config", func() error {
		if !injector.HasSynced() {
			return errors.New("not read yet")
		}
		return nil
	})
	validator, err := validate.New(reg, log)
	if err != nil {
		return nil, nil, err
	}
	srv, err := webhookserver.New(o.webhook, authority.ServerTLSConfig(), injector.Handler(), validator.Handler(), log)
	if err != nil {
		return nil, nil, err
	}
	out := []component{{"injector", false, injector.Start}, {"webhook server", false, srv.Start}}
	if client != nil {
		roots := func() ([]byte, <-chan struct{}) {
			b, changed := authority.Authority().Watch()
			return b.RootPEM(), changed
		}
		// Revision tags have names nobody knew at install time: keeping
		// their caBundle takes list, watch and patch on every
		// MutatingWebhookConfiguration, as istiod's ClusterRole grants.
		if o.patcher.TagWebhooks, err = inject.CanWatchWebhooks(ctx, client); err != nil {
			return nil, nil, err
		}
		if !o.patcher.TagWebhooks {
			log.Warn("revision tags' caBundle not kept: this service account may not list and watch MutatingWebhookConfigurations")
		}
		out = append(out, component{"injector informers", false, injectorInformers(injector, client, o.inject, o.patcher.TagWebhooks)})
		patcher, err := webhookserver.NewCABundlePatcher(o.patcher, client, roots, reg, log)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, component{"webhook caBundle patcher", true, patcher.Start})
	}
	return out, injector, nil
}

func synced(src config.Source) func() error {
	return func() error {
		if !src.HasSynced() {
			return errors.New("not synced yet")
		}
		return nil
	}
}

// transportBufferSize is a gRPC connection's write buffer, and its read
// buffer on the plaintext port.
const transportBufferSize = 16 << 10

// grpcServers builds the plaintext server (nil when turned off) and the TLS
// server. The TLS server asks for a client certificate but does not require
// one: callers authenticate by certificate or by token.
func (o *serveOptions) grpcServers(tlsCfg *tls.Config, guard *streamauth.Guard) (plain, secure *grpc.Server) {
	common := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(4 << 20),
		// A 16 KiB write buffer, not gRPC's 32 KiB. A connection takes
		// it from a pool shared by buffer size and, when it has under
		// 1,000 bytes to write (a push after the first configuration),
		// holds it across a yield to the scheduler: a push to 1,000
		// proxies held up to 27 MB of them at once, which the collector
		// found live and the heap's goal doubled. An HTTP/2 frame is at
		// most 16 KiB, so a first configuration is still written a frame
		// per system call. Read buffers are set per server below.
		// BENCHMARKS.md ("Pushes hold less") has the figures.
		grpc.WriteBufferSize(transportBufferSize),
		grpc.MaxConcurrentStreams(uint32(o.xds.MaxStreamsPerConnection)),
		// MaxConnectionAge sends GOAWAY (gRPC adds +/-10% jitter); the
		// proxy's stream then has the grace period to move.
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: 30 * time.Second, Timeout: 10 * time.Second,
			MaxConnectionAge: o.maxStreamAgeOrInfinity(), MaxConnectionAgeGrace: 10 * time.Second,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
		// xDS responses reference the shared, already-marshalled resources
		// instead of copying them into one buffer per response.
		grpc.ForceServerCodecV2(xdsserver.Codec()),
	}
	if o.grpcAddr != "" {
		// On plain TCP gRPC reads into a pooled buffer, held only while
		// there is data to read.
		plain = grpc.NewServer(append(common, grpc.ReadBufferSize(transportBufferSize),
			grpc.ChainStreamInterceptor(guard.DrainInterceptor()))...)
	}
	// Every xDS stream on the TLS port is authenticated and must name a node
	// of the caller's own namespace. Over TLS gRPC would give each
	// connection a read buffer of its own for the connection's life, in
	// front of the TLS connection's record buffer: none
	// (BenchmarkIdleTLSConnectionHeap: 88 KB a connection with gRPC's
	// 32 KiB, 45 KB without, client and server together).
	secure = grpc.NewServer(append(common, grpc.ReadBufferSize(0), grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.ChainStreamInterceptor(guard.StreamInterceptor()))...)
	return plain, secure
}

func (o *serveOptions) maxStreamAgeOrInfinity() time.Duration {
	if o.maxStreamAge == 0 {
		return time.Duration(math.MaxInt64)
	}
	return o.maxStreamAge
}

// serveGRPC serves s on addr until ctx ends, then stops it gracefully:
// streams get a few seconds to finish before they are cut.
func serveGRPC(name, addr string, s *grpc.Server, log *slog.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s server: %w", name, err)
		}
		log.Info(name+" server listening", "addr", l.Addr().String())
		errc := make(chan error, 1)
		go func() { errc <- s.Serve(l) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		stopped := make(chan struct{})
		go func() { s.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			s.Stop()
		}
		return nil
	}
}
