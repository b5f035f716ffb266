package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// ended waits for c's stream to end and returns its status code.
func (c *sotwClient) ended() codes.Code {
	c.t.Helper()
	for {
		select {
		case <-c.recv:
		case err := <-c.errc:
			return status.Code(err)
		case <-time.After(20 * time.Second):
			c.t.Fatal("the stream did not end within 20s")
		}
	}
}

func tightLimits(o *Options) {
	o.MaxStreams, o.MaxNodeBytes, o.MaxNodeIDBytes, o.MaxNames, o.MaxUnknownNames = 2, 4096, 256, 50, 10
}

// A caller, authenticated or not, cannot make a stream hold more than the
// bounds say: its node, the names it subscribes to (in all, and those it
// was never sent) and the number of streams are bounded, and a refusal
// names the bound.
func TestStreamBounds(t *testing.T) {
	store := meshStore(t, 3)
	ts := startServer(t, store, tightLimits)
	cc := dial(t, ts.addr)
	sidecar := "sidecar~10.1.0.3~app.ns-0~ns-0.svc.cluster.local"

	cases := map[string]struct {
		id     string
		meta   map[string]any
		names  []string
		code   codes.Code
		reason string
	}{
		"a node whose metadata is over the limit is refused": {
			id: sidecar, meta: map[string]any{"LABELS": map[string]any{"big": strings.Repeat("x", 8192)}},
			code: codes.InvalidArgument, reason: refuseNodeTooLarge,
		},
		"a node ID over the limit is refused": {
			id: "sidecar~10.1.0.3~" + strings.Repeat("a", 300) + ".ns-0~ns-0.svc.cluster.local", code: codes.InvalidArgument, reason: refuseNodeIDTooLong,
		},
		"a request for more names than the limit is refused": {
			id: sidecar, names: manyNames("outbound|80||x", 51), code: codes.InvalidArgument, reason: refuseTooManyNames,
		},
		"a first request guessing more names than the unknown limit is refused": {
			id: sidecar, names: manyNames("outbound|80||x", 11), code: codes.InvalidArgument, reason: refuseUnknownNames,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := ts.counter(t, "discovery_xds_streams_refused_total", "reason", tc.reason)
			c := newSotwClient(t, cc, node(tc.id, tc.meta))
			c.send(gen.EndpointType, tc.names, "", "", "")
			if code := c.ended(); code != tc.code {
				t.Fatalf("stream ended with %v, want %v", code, tc.code)
			}
			if n := ts.counter(t, "discovery_xds_streams_refused_total", "reason", tc.reason); n != before+1 {
				t.Errorf("refused{%s} went from %v to %v", tc.reason, before, n)
			}
		})
	}

	t.Run("names the proxy was never sent are bounded when its configuration is known too", func(t *testing.T) {
		c := newSotwClient(t, cc, node(sidecar, nil))
		c.send(gen.ClusterType, nil, "", "", "")
		cds := c.next()
		c.ack(cds, nil)
		var known []string
		for _, n := range names(t, cds) {
			if strings.HasPrefix(n, "outbound|") && len(known) < 3 {
				known = append(known, n)
			}
		}
		eds := append(append([]string{}, known...), manyNames("outbound|80||nothing", 10)...)
		c.send(gen.EndpointType, eds, "", "", "")
		if r := c.next(); r.GetTypeUrl() != gen.EndpointType {
			t.Fatalf("got %s, want endpoints", r.GetTypeUrl())
		}
		c.send(gen.EndpointType, append(eds, "outbound|80||one-too-many"), "", "", "")
		if code := c.ended(); code != codes.InvalidArgument {
			t.Fatalf("stream ended with %v, want InvalidArgument", code)
		}
	})

	t.Run("a delta stream's unknown names count across requests", func(t *testing.T) {
		d := newDeltaClientOn(t, cc)
		d.send(&discovery.DeltaDiscoveryRequest{Node: node(sidecar, nil), TypeUrl: gen.ClusterType})
		r := d.next()
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r.GetNonce()})
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: manyNames("outbound|80||a", 6)})
		d.next()
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: manyNames("outbound|80||b", 6)})
		if code := d.ended(); code != codes.InvalidArgument {
			t.Fatalf("stream ended with %v, want InvalidArgument", code)
		}
	})

	t.Run("streams beyond the replica's limit are refused, and admitted again once one ends", func(t *testing.T) {
		a := newSotwClient(t, cc, node(sidecar, nil))
		a.send(gen.ClusterType, nil, "", "", "")
		a.next()
		b := newSotwClient(t, cc, node(sidecar, nil))
		b.send(gen.ClusterType, nil, "", "", "")
		b.next()
		over := newSotwClient(t, cc, node(sidecar, nil))
		over.send(gen.ClusterType, nil, "", "", "")
		if code := over.ended(); code != codes.ResourceExhausted {
			t.Fatalf("third stream ended with %v, want ResourceExhausted", code)
		}
		a.cancel()
		eventually(t, "a stream admitted again", func() bool {
			c := newSotwClient(t, cc, node(sidecar, nil))
			c.send(gen.ClusterType, nil, "", "", "")
			select {
			case <-c.recv:
				return true
			case <-c.errc:
				return false
			case <-time.After(5 * time.Second):
				return false
			}
		})
	})
}

func manyNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d.ns-0.svc.cluster.local", prefix, i)
	}
	return out
}

// ended waits for d's stream to end and returns its status code.
func (c *deltaClient) ended() codes.Code {
	c.t.Helper()
	for {
		select {
		case <-c.recv:
		case err := <-c.errc:
			return status.Code(err)
		case <-time.After(20 * time.Second):
			c.t.Fatal("the stream did not end within 20s")
		}
	}
}
