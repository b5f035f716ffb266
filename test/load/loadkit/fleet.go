package loadkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// FleetOptions configure the simulated proxies.
type FleetOptions struct {
	// Proxies is the number of simulated sidecars.
	Proxies int
	// SotW uses state-of-the-world ADS instead of delta.
	SotW bool
	// ConnectRate is how many proxies connect per second at the start;
	// 0 connects them all at once.
	ConnectRate float64
	// IstioVersion is the ISTIO_VERSION the proxies announce.
	IstioVersion string
	// Resume keeps what a proxy holds when its stream ends and presents
	// it on the next stream (delta initial_resource_versions, for every
	// type), as Envoy does; otherwise every stream starts empty.
	Resume bool
	// Verify records what each proxy holds (endpoint addresses, route
	// names) so that Fleet.Verify can check it against the World.
	Verify bool
	// FirstIndex numbers the proxies from this index (pod names, node IDs),
	// so that two fleets on one World do not share node IDs.
	FirstIndex int
	// Decode is how much of each resource a proxy decodes: DecodeFull
	// (the default) all of it, as Envoy would, NACKing what Envoy would
	// refuse; DecodeLight only what it tracks (scan), to measure a server
	// without the fleet's decoding on the same cores; DecodeBoth both,
	// NACKing where they disagree (for tests).
	Decode string
	// Window fixes each proxy's gRPC flow-control windows (per stream and
	// per connection) at this many bytes; 0 leaves gRPC's default, which
	// grows with the measured bandwidth-delay product up to 16 MB. What a
	// proxy has received and not yet read is bounded by it: a fleet of
	// thousands on one machine needs a small one.
	Window int
	// Backoff is gRPC's connection back-off (how soon a proxy dials again
	// after a failed connection); zero: gRPC's default (1 s, x1.6, up to
	// 120 s).
	Backoff backoff.Config
	// InjectedLabels gives each proxy the labels Istio's injector adds to
	// a pod, service.istio.io/canonical-name and canonical-revision (the
	// service's name and "v1"), and pilot-agent sends with the pod's
	// others. With tracing on they separate proxies of different services
	// (the connection managers' tracing tags name them); without them the
	// proxies of a namespace are alike.
	InjectedLabels bool
}

// The fleet's decode modes (FleetOptions.Decode).
const (
	DecodeFull  = "full"
	DecodeLight = "light"
	DecodeBoth  = "both"
)

// DefaultFleetOptions are 100 delta proxies connecting at once.
func DefaultFleetOptions() FleetOptions {
	return FleetOptions{Proxies: 100, IstioVersion: "1.28.0", Decode: DecodeFull}
}

// EnvoyBackoff is close to Envoy's reconnect back-off for its xDS stream
// (500 ms base, jittered, capped at 30 s, here with gRPC's x1.6 steps).
func EnvoyBackoff() backoff.Config {
	return backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 30 * time.Second}
}

// AddFlags registers the fleet's flags.
func (o *FleetOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Proxies, "proxies", o.Proxies, "simulated sidecars, spread over the namespaces")
	fs.BoolVar(&o.SotW, "sotw", o.SotW, "use state-of-the-world ADS instead of delta")
	fs.Float64Var(&o.ConnectRate, "connect-rate", o.ConnectRate, "proxies connecting per second at the start (0: all at once)")
	fs.StringVar(&o.IstioVersion, "istio-version", o.IstioVersion, "ISTIO_VERSION the proxies announce")
	fs.BoolVar(&o.Resume, "resume", o.Resume, "a reconnecting proxy presents the versions it holds (delta initial_resource_versions), as Envoy does; otherwise it starts empty")
	fs.StringVar(&o.Decode, "decode", o.Decode, "how much of each resource a proxy decodes: full (all of it, validated as Envoy would), light (only its name, references, endpoint addresses and route names, read from the wire: the light client mode, to measure the server rather than the fleet), both (light checked against full, for tests)")
	fs.IntVar(&o.Window, "window", o.Window, "fix each proxy's gRPC flow-control windows at this many bytes (at least 65536; 0: gRPC's default, growing up to 16 MB): what the fleet has received and not yet read stays within proxies x window")
	fs.BoolVar(&o.InjectedLabels, "injected-labels", o.InjectedLabels, "each proxy also sends the labels Istio's injector adds to a pod (service.istio.io/canonical-name and canonical-revision), as an injected pod's pilot-agent does: with tracing on, proxies of different services then differ")
	fs.BoolVar(&o.Verify, "verify", o.Verify, "check at the end that every proxy holds the world's configuration (clusters, endpoint addresses, routes)")
}

// Validate reports options that cannot work.
func (o *FleetOptions) Validate() error {
	if o.Proxies < 1 || o.Proxies > 20000 {
		return fmt.Errorf("--proxies %d: must be 1 to 20000", o.Proxies)
	}
	if o.Window != 0 && (o.Window < 64<<10 || o.Window > 1<<30) {
		return fmt.Errorf("--window %d: must be 0 or 65536 to 1 GiB", o.Window)
	}
	if o.ConnectRate < 0 {
		return fmt.Errorf("--connect-rate %g: must not be negative", o.ConnectRate)
	}
	if o.FirstIndex < 0 {
		return fmt.Errorf("first proxy index %d: must not be negative", o.FirstIndex)
	}
	switch o.Decode {
	case "", DecodeFull, DecodeLight, DecodeBoth:
	default:
		return fmt.Errorf("--decode %q: must be full, light or both", o.Decode)
	}
	if o.Resume && o.SotW {
		return errors.New("--resume is for delta proxies (state of the world sends whole listener and cluster sets anyway)")
	}
	return nil
}

// Behavior is how a proxy departs from a well-behaved Envoy.
type Behavior struct {
	// NoACK: the proxy asks for clusters and listeners, reads every
	// response and never answers one (no ACK, no NACK, no subscription).
	NoACK bool
	// ReadDelay: the proxy waits this long before reading each response
	// (with gRPC's smallest flow-control windows, so the server's sends
	// block on it), and otherwise behaves.
	ReadDelay time.Duration
	// Reject, when set, is asked about every resource the proxy decodes;
	// an error NACKs the response, as an Envoy that cannot take a
	// resource does (the proxy otherwise behaves and stays well-behaved).
	Reject func(proto.Message) error
}

// RejectRoute rejects a RouteConfiguration holding a route named name.
func RejectRoute(name string) func(proto.Message) error {
	return func(m proto.Message) error {
		rc, ok := m.(*routev3.RouteConfiguration)
		if !ok {
			return nil
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if r.GetName() == name {
					return fmt.Errorf("route configuration %s: route %q refused", rc.GetName(), name)
				}
			}
		}
		return nil
	}
}

func (b Behavior) normal() bool { return !b.NoACK && b.ReadDelay == 0 }

// Dial opens proxy i's connection to the control plane: a fixed address,
// or a choice among replicas as a Kubernetes Service would make.
type Dial func(ctx context.Context, proxy int) (net.Conn, error)

// DialAddress dials addr for every proxy.
func DialAddress(addr string) Dial {
	var d net.Dialer
	return func(ctx context.Context, _ int) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

// Fleet is the simulated proxies and what they share.
type Fleet struct {
	opts     FleetOptions
	names    *Names
	versions *Names // resource versions, interned (Resume)
	tracker  *tracker
	proxies  []*proxy
	// slots bounds the responses decoded at once: the fleet's CPU is the
	// machine's either way, and this bounds the garbage of 1,000 decodes.
	slots chan struct{}

	mu    sync.Mutex
	notes []string // first problems seen (NACKs, dropped streams)
	more  int
	ended map[string]int // streams ended without being asked to, by error
}

// NewFleet makes the proxies: proxy i is a pod of service i mod N, in
// that service's namespace, with one of its endpoint addresses (never the
// one endpoint churn replaces).
func NewFleet(opts FleetOptions, w *World) (*Fleet, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	f := &Fleet{opts: opts, names: newNames(), versions: newNames(), tracker: newTracker(), slots: make(chan struct{}, 2*runtime.GOMAXPROCS(0))}
	w.mu.Lock()
	defer w.mu.Unlock()
	for idx := 0; idx < opts.Proxies; idx++ {
		i := idx + opts.FirstIndex
		svc := w.services[i%len(w.services)]
		ip := svc.Endpoints[(i/len(w.services))%(len(svc.Endpoints)-1)]
		pod := fmt.Sprintf("%s-%d", svc.Name, i)
		id := fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.%s", ip, pod, svc.Namespace, svc.Namespace, w.opts.DomainSuffix)
		labels := map[string]any{"app": svc.Name, "version": "v1"}
		if opts.InjectedLabels {
			labels["service.istio.io/canonical-name"] = svc.Name
			labels["service.istio.io/canonical-revision"] = "v1"
		}
		md, err := structpb.NewStruct(map[string]any{
			"NAMESPACE": svc.Namespace, "NAME": pod, "WORKLOAD_NAME": svc.Name, "SERVICE_ACCOUNT": svc.Name,
			"LABELS": labels, "INSTANCE_IPS": ip,
			"ISTIO_VERSION": opts.IstioVersion, "CLUSTER_ID": "Kubernetes", "MESH_ID": w.opts.DomainSuffix,
			"INTERCEPTION_MODE": "REDIRECT",
		})
		if err != nil {
			return nil, err
		}
		f.proxies = append(f.proxies, &proxy{f: f, idx: idx, node: &corev3.Node{Id: id, Cluster: svc.Name + "." + svc.Namespace, Metadata: md}, reconnect: make(chan struct{}, 1)})
	}
	return f, nil
}

// Len is the number of proxies.
func (f *Fleet) Len() int { return len(f.proxies) }

// Names is the fleet's table of resource names, which changes refer to.
func (f *Fleet) Names() *Names { return f.names }

// SetBehavior makes proxy i misbehave; call it before Start. Changes and
// connections are not expected to reach misbehaving proxies.
func (f *Fleet) SetBehavior(i int, b Behavior) { f.proxies[i].behavior = b }

// Normal reports whether proxy i behaves.
func (f *Fleet) Normal(i int) bool { return f.proxies[i].behavior.normal() }

// NodeID is proxy i's node ID.
func (f *Fleet) NodeID(i int) string { return f.proxies[i].node.GetId() }

// NACKs is how many responses proxy i rejected.
func (f *Fleet) NACKs(i int) int64 { return f.proxies[i].nacks.Load() }

// Track makes a change active: proxies start looking for it. Call it
// before the change is written, so that no proxy can see it first. target
// is the one proxy it concerns, or -1 for every well-behaved proxy;
// onComplete changes (connect, reconnect) are done at a proxy when a
// stream it opened after the change holds a complete configuration.
func (f *Fleet) Track(kind string, target int, expects []Expectation, onComplete bool) *Change {
	var mask []bool
	if target < 0 {
		for i, p := range f.proxies {
			if !p.behavior.normal() {
				if mask == nil {
					mask = make([]bool, len(f.proxies))
					for j := range mask {
						mask[j] = true
					}
				}
				mask[i] = false
			}
		}
	}
	return f.tracker.add(kind, len(f.proxies), target, mask, expects, onComplete)
}

// Retire stops proxies looking for the changes.
func (f *Fleet) Retire(cs ...*Change) { f.tracker.retire(cs...) }

// Reconnect asks proxy i to close its stream and open a new one at once.
func (f *Fleet) Reconnect(i int) {
	select {
	case f.proxies[i].reconnect <- struct{}{}:
	default:
	}
}

// note keeps the first problems for the report.
func (f *Fleet) note(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.notes) < 20 {
		f.notes = append(f.notes, s)
	} else {
		f.more++
	}
}

// countEnded counts a stream the proxy did not end, by its error.
func (f *Fleet) countEnded(err error) {
	msg := "<nil>"
	if err != nil {
		msg = err.Error()
		if st, ok := status.FromError(err); ok {
			msg = st.Code().String() + ": " + st.Message()
		}
	}
	if len(msg) > 100 {
		msg = msg[:100] + "..."
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended == nil {
		f.ended = map[string]int{}
	}
	f.ended[msg]++
}

// Ended counts the streams that ended without the proxy asking, by error.
func (f *Fleet) Ended() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.ended))
	for k, v := range f.ended {
		out[k] = v
	}
	return out
}

// Notes are the first problems the proxies saw (NACKs, streams the server
// ended), and how many more there were.
func (f *Fleet) Notes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append([]string(nil), f.notes...)
	if f.more > 0 {
		out = append(out, fmt.Sprintf("and %d more proxy notes", f.more))
	}
	return out
}

// Start connects the proxies (all at once or at ConnectRate) to addr and
// returns a function that waits for them to stop once ctx ends.
func (f *Fleet) Start(ctx context.Context, addr string) (wait func(), err error) {
	return f.StartDial(ctx, DialAddress(addr))
}

// StartDial is Start with each proxy's connections opened by dial.
func (f *Fleet) StartDial(ctx context.Context, dial Dial) (wait func(), err error) {
	var wg sync.WaitGroup
	conns := make([]*grpc.ClientConn, 0, len(f.proxies))
	closeAll := func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}
	for _, p := range f.proxies {
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(p),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				c, err := dial(ctx, p.idx)
				if err == nil {
					p.remote.Store(c.RemoteAddr().String())
					p.dialed.Store(time.Now().UnixNano())
				}
				return c, err
			}),
		}
		if f.opts.Backoff != (backoff.Config{}) {
			opts = append(opts, grpc.WithConnectParams(grpc.ConnectParams{Backoff: f.opts.Backoff, MinConnectTimeout: 20 * time.Second}))
		}
		switch {
		case p.behavior.ReadDelay > 0: // no BDP window growth: the server's sends wait for the reads
			opts = append(opts, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		case f.opts.Window > 0:
			opts = append(opts, grpc.WithInitialWindowSize(int32(f.opts.Window)), grpc.WithInitialConnWindowSize(int32(f.opts.Window)))
		}
		cc, err := grpc.NewClient("passthrough:///discovery", opts...)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("proxy %d: %w", p.idx, err)
		}
		conns = append(conns, cc)
	}
	var interval time.Duration
	if f.opts.ConnectRate > 0 {
		interval = time.Duration(float64(time.Second) / f.opts.ConnectRate)
	}
	wg.Add(1) // the launcher itself, so that Wait cannot pass it
	go func() {
		defer wg.Done()
		for i, p := range f.proxies {
			if interval > 0 && i > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(interval):
				}
			}
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			go func() { defer wg.Done(); p.run(ctx, conns[i]) }()
		}
	}()
	return func() { <-ctx.Done(); wg.Wait(); closeAll() }, nil
}

// WaitChanges waits until every change reached every proxy it concerns, or
// the timeout passes.
func WaitChanges(ctx context.Context, timeout time.Duration, cs ...*Change) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, c := range cs {
		select {
		case <-c.done:
		case <-deadline.C:
			return errors.New("timed out")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Totals sums the proxies' counters.
type Totals struct {
	Bytes     int64            `json:"bytes"`
	Responses map[string]int64 `json:"responses"`
	// Resources counts the resources received, by type.
	Resources map[string]int64 `json:"resources"`
	NACKs     int64            `json:"nacks"`
	Streams   int64            `json:"streams"`
	Drops     int64            `json:"streamsDropped"`
}

// Totals sums the counters of every proxy.
func (f *Fleet) Totals() Totals {
	t := Totals{Responses: map[string]int64{}, Resources: map[string]int64{}}
	for _, p := range f.proxies {
		t.Bytes += p.bytes.Load()
		t.NACKs += p.nacks.Load()
		t.Streams += p.streams.Load()
		t.Drops += p.drops.Load()
		for typ, i := range typeIndex {
			t.Responses[shortType(typ)] += p.responses[i].Load()
			t.Resources[shortType(typ)] += p.resources[i].Load()
		}
	}
	return t
}

// Minus is the difference t - o.
func (t Totals) Minus(o Totals) Totals {
	d := Totals{
		Bytes: t.Bytes - o.Bytes, NACKs: t.NACKs - o.NACKs, Streams: t.Streams - o.Streams, Drops: t.Drops - o.Drops,
		Responses: map[string]int64{}, Resources: map[string]int64{},
	}
	for k, v := range t.Responses {
		d.Responses[k] = v - o.Responses[k]
	}
	for k, v := range t.Resources {
		d.Resources[k] = v - o.Resources[k]
	}
	return d
}

// Pushes counts the responses of every type.
func (t Totals) Pushes() int64 {
	var n int64
	for _, v := range t.Responses {
		n += v
	}
	return n
}

// ResourceCount counts the resources of every type.
func (t Totals) ResourceCount() int64 {
	var n int64
	for _, v := range t.Resources {
		n += v
	}
	return n
}
