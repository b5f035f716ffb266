package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
	"github.com/meshplane/discovery/pkg/xds/push"
)

// fakeProxy drives one conn the way go-control-plane's server does, without
// gRPC: it holds one state-of-the-world watch per type and acknowledges
// every response.
type fakeProxy struct {
	c     *conn
	subs  map[string]*stream.Subscription
	chans map[string]chan cachev3.Response
	nonce int
}

func (f *fakeProxy) watch(tb testing.TB, s *Server, typeURL string, nonce string) {
	tb.Helper()
	req := &discovery.DiscoveryRequest{TypeUrl: typeURL, ResponseNonce: nonce}
	s.reqs.Store(req, f.c)
	if _, err := (watcher{s}).CreateWatch(req, f.subs[typeURL], f.chans[typeURL]); err != nil {
		tb.Fatal(err)
	}
}

// receive takes the response of typeURL, records it as returned, renews
// the watch and returns the response's resource bytes.
func (f *fakeProxy) receive(tb testing.TB, s *Server, typeURL string) int {
	tb.Helper()
	select {
	case r := <-f.chans[typeURL]:
		f.subs[typeURL].SetReturnedResources(r.GetReturnedResources())
		resp, err := r.GetDiscoveryResponse()
		if err != nil {
			tb.Fatal(err)
		}
		f.nonce++
		resp.Nonce = fmt.Sprint(f.nonce)
		callbacks{s}.OnStreamResponse(context.Background(), f.c.key.id, r.GetRequest(), resp)
		size := 0
		for _, a := range resp.GetResources() {
			size += len(a.GetValue())
		}
		f.watch(tb, s, typeURL, resp.Nonce)
		return size
	case <-time.After(30 * time.Second):
		tb.Fatalf("no %s response", gen.ShortType(typeURL))
	}
	return 0
}

// fleet starts a Server on store (no gRPC) and connects n sidecars spread
// over namespaces, each subscribed to everything and in sync.
func fleet(tb testing.TB, store *model.Store, n, namespaces int) (*Server, []*fakeProxy) {
	tb.Helper()
	opts := DefaultOptions()
	s, err := New(opts, store, testLog(), prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.queue.Start(ctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done; s.xdsCancel() })
	var out []*fakeProxy
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		p, err := model.ParseProxy(fmt.Sprintf("sidecar~10.200.%d.%d~p%d.%s~%s.svc.cluster.local", i/250, i%250, i, ns, ns), nil)
		if err != nil {
			tb.Fatal(err)
		}
		c := newConn(s, streamKey{id: int64(i + 1)}, newStreamCtl(), nil)
		c.proxy = p
		s.conns.Store(c.key, c)
		s.work(ctx, c, &pushItem{full: true, world: store.World(), enqueued: time.Now()})
		f := &fakeProxy{c: c, subs: map[string]*stream.Subscription{}, chans: map[string]chan cachev3.Response{}}
		for _, t := range gen.TypeURLs {
			var names []string
			if t == gen.RouteType || t == gen.EndpointType {
				names = c.cfg.Names(t)
			}
			sub := stream.NewSotwSubscription(names, t == gen.ClusterType || t == gen.ListenerType)
			f.subs[t] = &sub
			f.chans[t] = make(chan cachev3.Response, 1)
			f.watch(tb, s, t, "")
			f.receive(tb, s, t)
		}
		out = append(out, f)
	}
	return s, out
}

func request(u *model.Update) *push.Request {
	r := &push.Request{World: u.World, Changes: map[model.Key]model.Op{}, First: time.Now(), Updates: 1}
	for _, c := range u.Changes {
		r.Changes[c.Key] = c.Op
	}
	return r
}

// BenchmarkEndpointChangeTo1000Proxies pushes one service's new endpoints
// to 1,000 connected sidecars (20 namespaces) in a 1,000-service World and
// waits until every proxy has its EDS response.
func BenchmarkEndpointChangeTo1000Proxies(b *testing.B) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(1000, 50, 10)...); err != nil {
		b.Fatal(err)
	}
	s, proxies := fleet(b, store, 1000, 20)
	b.ReportAllocs()
	b.ResetTimer()
	bytes := 0
	for i := 0; i < b.N; i++ {
		u, err := store.Apply(worldtest.Slice("ns-7", "svc-7", fmt.Sprintf("10.77.%d.%d", i/250%250, i%250+1)))
		if err != nil || u == nil {
			b.Fatalf("apply: %v", err)
		}
		s.onPush(context.Background(), request(u))
		for _, f := range proxies {
			bytes += f.receive(b, s, gen.EndpointType)
		}
	}
	b.ReportMetric(float64(bytes)/float64(b.N*len(proxies)), "bytes/proxy")
}

// BenchmarkVirtualServiceEditTo100Proxies edits one VirtualService in a
// 1,000-service World and waits until each of 100 connected sidecars has
// the new route; bytes/proxy is what one edit costs each proxy.
func BenchmarkVirtualServiceEditTo100Proxies(b *testing.B) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(1000, 50, 10)...); err != nil {
		b.Fatal(err)
	}
	s, proxies := fleet(b, store, 100, 20)
	b.ReportAllocs()
	b.ResetTimer()
	bytes := 0
	for i := 0; i < b.N; i++ {
		u, err := store.Apply(vsEdit("ns-3", "svc-3", fmt.Sprint(i), int32(10+i%80)))
		if err != nil || u == nil {
			b.Fatalf("apply: %v", err)
		}
		s.onPush(context.Background(), request(u))
		for _, f := range proxies {
			bytes += f.receive(b, s, gen.RouteType)
		}
	}
	b.ReportMetric(float64(bytes)/float64(b.N*len(proxies)), "bytes/proxy")
}
