package gen

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// sharedAddressWorld has two ServiceEntries that declare the same address
// on the same HTTP port: the listener can match the address for one of
// them only (the first, chainClaims).
const sharedAddressWorld = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a, namespace: default, resourceVersion: "1"}
spec:
  hosts: [a.example.com]
  addresses: [240.0.0.5]
  resolution: DNS
  ports:
  - {number: 80, name: http, protocol: HTTP}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: b, namespace: default, resourceVersion: "1"}
spec:
  hosts: [b.example.com]
  addresses: [240.0.0.5]
  resolution: DNS
  ports:
  - {number: 80, name: http, protocol: HTTP}
`

func TestSharedAddressSendsOnlyTheRoutesOfChainsItHas(t *testing.T) {
	store := loadWorld(t, sharedAddressWorld)
	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	p := sidecar(t, "default")
	cc, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatalf("the class is not published: %v", err)
	}
	if cc.Sets[RouteType].Get("a.example.com:80") == nil {
		t.Errorf("the route of the service whose chain matches the address is missing: %v", cc.Sets[RouteType].Names)
	}
	if cc.Sets[RouteType].Get("b.example.com:80") != nil {
		t.Errorf("the route of the service whose address an earlier one claimed is sent, though no listener uses it")
	}
	if !strings.Contains(logs.String(), "b.example.com") {
		t.Errorf("the service left without a chain is not reported:\n%s", logs.String())
	}
	// Regenerated from the previous configuration, the same holds.
	if _, err := store.Apply(vsEvent("default", "b", "b.example.com", "1", 100)); err != nil {
		t.Fatal(err)
	}
	next, err := g.Class(store.World(), p, cc)
	if err != nil {
		t.Fatalf("the next class is not published: %v", err)
	}
	if next.Sets[RouteType].Get("b.example.com:80") != nil {
		t.Errorf("after a VirtualService edit, the unused route is sent")
	}
}
