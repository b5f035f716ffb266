package server

import (
	"fmt"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// warmingProxy opens a delta stream for proxy i and asks for clusters.
func warmingProxy(t *testing.T, ts *testServer, i int) *deltaClient {
	t.Helper()
	c := newDeltaClient(t, ts)
	c.send(&discovery.DeltaDiscoveryRequest{Node: node(fmt.Sprintf("sidecar~10.9.0.%d~client-%d.ns-0~ns-0.svc.cluster.local", i+1, i), nil), TypeUrl: gen.ClusterType})
	return c
}

// silent reports that c received nothing for a while.
func silent(t *testing.T, c *deltaClient, what string) {
	t.Helper()
	select {
	case r := <-c.recv:
		t.Fatalf("%s: got a %s response", what, gen.ShortType(r.GetTypeUrl()))
	case err := <-c.errc:
		t.Fatalf("%s: the stream ended: %v", what, err)
	case <-time.After(300 * time.Millisecond):
	}
}

// first is c's next response, within 20s.
func first(t *testing.T, c *deltaClient) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	select {
	case r := <-c.recv:
		return r
	case err := <-c.errc:
		t.Fatalf("the stream ended: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no response within 20s: the stream was not admitted")
	}
	return nil
}

// warm answers c's clusters, its first response r, and asks for and
// answers its listeners, as Envoy does.
func warm(c *deltaClient, r *discovery.DeltaDiscoveryResponse) {
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ListenerType})
	for {
		r = c.next()
		if r.GetTypeUrl() == gen.ListenerType {
			c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ListenerType, ResponseNonce: r.GetNonce()})
			return
		}
	}
}

// New streams are given their first configuration at most
// WarmingStreams at a time: another waits, with its stream open and
// nothing refused, until one answers its first listeners, ends, or has
// held its slot for WarmingTimeout.
func TestNewStreamsWaitForAWarmingSlot(t *testing.T) {
	t.Run("a stream waits until the one warming answers its listeners", func(t *testing.T) {
		ts := startServer(t, meshStore(t, 3), func(o *Options) { o.WarmingStreams, o.WarmingTimeout = 1, time.Minute })
		a := warmingProxy(t, ts, 0)
		ra := first(t, a) // a holds the slot before b asks
		b := warmingProxy(t, ts, 1)
		eventually(t, "the second stream to wait", func() bool { return ts.counter(t, "discovery_xds_streams_waiting") == 1 })
		silent(t, b, "while the first stream warms")
		warm(a, ra)
		if r := first(t, b); r.GetTypeUrl() != gen.ClusterType || len(r.GetResources()) == 0 {
			t.Fatalf("the second stream's first response: %d %s resources", len(r.GetResources()), gen.ShortType(r.GetTypeUrl()))
		}
		eventually(t, "no stream to wait", func() bool { return ts.counter(t, "discovery_xds_streams_waiting") == 0 })
		if n := ts.counter(t, "discovery_xds_streams_refused_total"); n != 0 {
			t.Fatalf("%v streams refused", n)
		}
	})
	t.Run("a stream that ends frees its slot", func(t *testing.T) {
		ts := startServer(t, meshStore(t, 3), func(o *Options) { o.WarmingStreams, o.WarmingTimeout = 1, time.Minute })
		a := warmingProxy(t, ts, 0)
		a.next()
		b := warmingProxy(t, ts, 1)
		silent(t, b, "while the first stream holds the slot")
		a.cancel()
		if r := first(t, b); r.GetTypeUrl() != gen.ClusterType {
			t.Fatalf("the second stream's first response is %s", gen.ShortType(r.GetTypeUrl()))
		}
	})
	t.Run("a stream that stops answering holds its slot for the timeout only", func(t *testing.T) {
		ts := startServer(t, meshStore(t, 3), func(o *Options) { o.WarmingStreams, o.WarmingTimeout = 1, time.Second })
		a := warmingProxy(t, ts, 0)
		a.next() // and never answers
		b := warmingProxy(t, ts, 1)
		silent(t, b, "while the first stream holds the slot")
		if r := first(t, b); r.GetTypeUrl() != gen.ClusterType {
			t.Fatalf("the second stream's first response is %s", gen.ShortType(r.GetTypeUrl()))
		}
	})
	t.Run("a stream waiting holds no slot when it ends", func(t *testing.T) {
		ts := startServer(t, meshStore(t, 3), func(o *Options) { o.WarmingStreams, o.WarmingTimeout = 1, time.Minute })
		a := warmingProxy(t, ts, 0)
		ra := first(t, a) // a holds the slot before b asks
		b := warmingProxy(t, ts, 1)
		eventually(t, "the second stream to wait", func() bool { return ts.counter(t, "discovery_xds_streams_waiting") == 1 })
		b.cancel()
		eventually(t, "the waiting stream to go", func() bool { return ts.counter(t, "discovery_xds_streams_waiting") == 0 })
		warm(a, ra)
		c := warmingProxy(t, ts, 2)
		if r := first(t, c); r.GetTypeUrl() != gen.ClusterType {
			t.Fatalf("the third stream's first response is %s", gen.ShortType(r.GetTypeUrl()))
		}
	})
}
