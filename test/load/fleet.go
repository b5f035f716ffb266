package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
}

// DefaultFleetOptions are 100 delta proxies connecting at once.
func DefaultFleetOptions() FleetOptions {
	return FleetOptions{Proxies: 100, IstioVersion: "1.28.0"}
}

// AddFlags registers the fleet's flags.
func (o *FleetOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Proxies, "proxies", o.Proxies, "simulated sidecars, spread over the namespaces")
	fs.BoolVar(&o.SotW, "sotw", o.SotW, "use state-of-the-world ADS instead of delta")
	fs.Float64Var(&o.ConnectRate, "connect-rate", o.ConnectRate, "proxies connecting per second at the start (0: all at once)")
	fs.StringVar(&o.IstioVersion, "istio-version", o.IstioVersion, "ISTIO_VERSION the proxies announce")
}

// Validate reports options that cannot work.
func (o *FleetOptions) Validate() error {
	if o.Proxies < 1 || o.Proxies > 20000 {
		return fmt.Errorf("--proxies %d: must be 1 to 20000", o.Proxies)
	}
	if o.ConnectRate < 0 {
		return fmt.Errorf("--connect-rate %g: must not be negative", o.ConnectRate)
	}
	return nil
}

// fleet is the simulated proxies and what they share.
type fleet struct {
	opts    FleetOptions
	names   *names
	tracker *tracker
	proxies []*proxy
	// slots bounds the responses decoded at once: the fleet's CPU is the
	// machine's either way, and this bounds the garbage of 1,000 decodes.
	slots chan struct{}

	mu    sync.Mutex
	notes []string // first problems seen (NACKs, dropped streams)
	more  int
}

// newFleet makes the proxies: proxy i is a pod of service i mod N, in
// that service's namespace, with one of its endpoint addresses (never the
// one endpoint churn replaces).
func newFleet(opts FleetOptions, w *World) (*fleet, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	f := &fleet{opts: opts, names: newNames(), tracker: newTracker(), slots: make(chan struct{}, 2*runtime.GOMAXPROCS(0))}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := 0; i < opts.Proxies; i++ {
		svc := w.services[i%len(w.services)]
		ip := svc.Endpoints[(i/len(w.services))%(len(svc.Endpoints)-1)]
		pod := fmt.Sprintf("%s-%d", svc.Name, i)
		id := fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.%s", ip, pod, svc.Namespace, svc.Namespace, w.opts.DomainSuffix)
		md, err := structpb.NewStruct(map[string]any{
			"NAMESPACE": svc.Namespace, "NAME": pod, "WORKLOAD_NAME": svc.Name, "SERVICE_ACCOUNT": svc.Name,
			"LABELS": map[string]any{"app": svc.Name, "version": "v1"}, "INSTANCE_IPS": ip,
			"ISTIO_VERSION": opts.IstioVersion, "CLUSTER_ID": "Kubernetes", "MESH_ID": w.opts.DomainSuffix,
			"INTERCEPTION_MODE": "REDIRECT",
		})
		if err != nil {
			return nil, err
		}
		f.proxies = append(f.proxies, &proxy{f: f, idx: i, node: &corev3.Node{Id: id, Cluster: svc.Name + "." + svc.Namespace, Metadata: md}, reconnect: make(chan struct{}, 1)})
	}
	return f, nil
}

// note keeps the first problems for the report.
func (f *fleet) note(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.notes) < 20 {
		f.notes = append(f.notes, s)
	} else {
		f.more++
	}
}

// start connects the proxies (all at once or at ConnectRate) to addr and
// returns a function that waits for them to stop once ctx ends.
func (f *fleet) start(ctx context.Context, addr string) (wait func(), err error) {
	var wg sync.WaitGroup
	conns := make([]*grpc.ClientConn, 0, len(f.proxies))
	closeAll := func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}
	for _, p := range f.proxies {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(p))
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

// waitChanges waits until every change reached every proxy it concerns, or
// the timeout passes.
func waitChanges(ctx context.Context, timeout time.Duration, cs ...*change) error {
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

// totals sums the proxies' counters.
type totals struct {
	Bytes     int64            `json:"bytes"`
	Responses map[string]int64 `json:"responses"`
	NACKs     int64            `json:"nacks"`
	Streams   int64            `json:"streams"`
	Drops     int64            `json:"streamsDropped"`
}

func (f *fleet) totals() totals {
	t := totals{Responses: map[string]int64{}}
	for _, p := range f.proxies {
		t.Bytes += p.bytes.Load()
		t.NACKs += p.nacks.Load()
		t.Streams += p.streams.Load()
		t.Drops += p.drops.Load()
		for typ, i := range typeIndex {
			t.Responses[shortType(typ)] += p.responses[i].Load()
		}
	}
	return t
}

func (t totals) minus(o totals) totals {
	d := totals{Bytes: t.Bytes - o.Bytes, NACKs: t.NACKs - o.NACKs, Streams: t.Streams - o.Streams, Drops: t.Drops - o.Drops, Responses: map[string]int64{}}
	for k, v := range t.Responses {
		d.Responses[k] = v - o.Responses[k]
	}
	return d
}

func (t totals) pushes() int64 {
	var n int64
	for _, v := range t.Responses {
		n += v
	}
	return n
}
