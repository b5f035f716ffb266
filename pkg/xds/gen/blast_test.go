package gen

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// badVirtualServices are VirtualServices Envoy would refuse the routes of
// (a CR/LF in a header name or value), on svc-1 of worldtest.Mesh(4, 2, 1).
const badVirtualServices = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: bad-match, namespace: ns-1}
spec:
  hosts: [svc-1]
  http:
  - match:
    - headers:
        "x-a\r\nb": {exact: "1"}
    route:
    - destination: {host: svc-1}
  - route:
    - destination: {host: svc-1}
      headers:
        request:
          set: {"x-b": "v\r\nInjected: 1"}
`

// One VirtualService whose routes Envoy would refuse costs only the
// resources built from it: every proxy still gets a configuration, the
// resources of other services are those it had without it, and the bad
// host's routes fail closed.
func TestABadVirtualServiceCostsOnlyItsOwnResources(t *testing.T) {
	base := model.NewStore(model.StoreOptions{})
	if _, err := base.Apply(worldtest.Mesh(4, 2, 1)...); err != nil {
		t.Fatal(err)
	}
	bad := model.NewStore(model.StoreOptions{})
	evs, err := worldtest.Decode([]byte(badVirtualServices))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Apply(append(worldtest.Mesh(4, 2, 1), evs...)...); err != nil {
		t.Fatal(err)
	}
	victim := "svc-1.ns-1.svc.cluster.local"
	for _, p := range []*model.Proxy{sidecar(t, "ns-0"), sidecar(t, "ns-1"), grpcProxy(t, "ns-0")} {
		t.Run(p.Class(), func(t *testing.T) {
			var logs bytes.Buffer
			g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
			want, err := g.Class(base.World(), p, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.Class(bad.World(), p, nil)
			if err != nil || got == nil {
				t.Fatalf("no configuration published: %v", err)
			}
			for _, typeURL := range TypeURLs {
				for _, n := range want.Sets[typeURL].Names {
					if mentions(n, victim) {
						continue
					}
					if r := got.Sets[typeURL].Get(n); r == nil || r.Hash != want.Sets[typeURL].Get(n).Hash {
						t.Errorf("%s %s differs from the configuration without the bad VirtualService", ShortType(typeURL), n)
					}
				}
			}
			r := got.Sets[RouteType].Get(RouteName(victim, 80))
			if r == nil {
				t.Fatalf("no route %s", RouteName(victim, 80))
			}
			var rc routev3.RouteConfiguration
			if err := r.Any.UnmarshalTo(&rc); err != nil {
				t.Fatal(err)
			}
			for _, vh := range rc.VirtualHosts {
				for _, rt := range vh.Routes {
					if rt.GetDirectResponse().GetStatus() != refusedStatus {
						t.Errorf("route %s of the refused host %s does not fail closed: %v", rt.Name, vh.Name, rt)
					}
				}
			}
			if len(rc.VirtualHosts) == 0 {
				t.Errorf("the refused host has no virtual host")
			}
			if !strings.Contains(logs.String(), "bad-match") || !strings.Contains(logs.String(), "Envoy's rules") {
				t.Errorf("the log does not name the config the refused routes came from:\n%s", logs.String())
			}
		})
	}
}

func mentions(name, host string) bool { return bytes.Contains([]byte(name), []byte(host)) }
