package server

import (
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// TestDeltaNamesOfASubscriptionChange: a request that changes a synced
// stream's subscription by name is answered from the names it subscribes
// and the names pushes left pending, not by comparing every name; the
// first request, a stream not synced and a wildcard subscription still
// compare everything.
func TestDeltaNamesOfASubscriptionChange(t *testing.T) {
	cases := map[string]struct {
		req             *discovery.DeltaDiscoveryRequest
		initial, synced bool
		want            []string // nil: every name
	}{
		"subscribes two routes": {
			req:    &discovery.DeltaDiscoveryRequest{ResponseNonce: "1", ResourceNamesSubscribe: []string{"a:80", "b:80"}},
			synced: true, want: []string{"a:80", "b:80", "pending:80"},
		},
		"subscribes without a nonce": {
			req:    &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a:80"}},
			synced: true, want: []string{"a:80", "pending:80"},
		},
		"unsubscribes only": {
			req:    &discovery.DeltaDiscoveryRequest{ResponseNonce: "1", ResourceNamesUnsubscribe: []string{"a:80"}},
			synced: true, want: []string{"pending:80"},
		},
		"subscribes to the wildcard": {
			req:    &discovery.DeltaDiscoveryRequest{ResponseNonce: "1", ResourceNamesSubscribe: []string{"*", "a:80"}},
			synced: true,
		},
		"the first request": {
			req:     &discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a:80"}},
			initial: true, synced: true,
		},
		"a stream not synced": {
			req: &discovery.DeltaDiscoveryRequest{ResponseNonce: "1", ResourceNamesSubscribe: []string{"a:80"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.req.TypeUrl = gen.RouteType
			c := &conn{types: map[string]*typeState{}}
			ts := c.of(gen.RouteType)
			ts.synced = tc.synced
			ts.pending = map[string]struct{}{"pending:80": {}}
			got := c.deltaNames(&deltaWatch{req: tc.req, initial: tc.initial}, nil, map[string]string{})
			slices.Sort(got)
			if (got == nil) != (tc.want == nil) || !slices.Equal(got, tc.want) {
				t.Errorf("names looked at: %q (nil: all), want %q", got, tc.want)
			}
		})
	}
}
