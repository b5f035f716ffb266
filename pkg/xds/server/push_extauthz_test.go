package server

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// The Service an ext_authz provider names decides whether CUSTOM policies
// are sent to it or denied: its change matters to every proxy, even where
// it is not exported; another unexported Service's does not.
// A change of a Service an ext_authz provider names matters to the proxies
// whose CUSTOM policies use the provider, even where the Service is not
// exported to them, and to no other proxy.
func TestExtAuthzServiceChangeMattersWhereAPolicyUsesIt(t *testing.T) {
	store := meshStore(t, 2)
	evs, err := worldtest.Decode([]byte(`
apiVersion: v1
kind: Service
metadata: {name: ext-authz, namespace: authz, annotations: {networking.istio.io/exportTo: "."}}
spec:
  clusterIP: 10.96.9.2
  ports: [{name: grpc, port: 9000}]
---
apiVersion: v1
kind: Service
metadata: {name: private, namespace: authz, annotations: {networking.istio.io/exportTo: "."}}
spec:
  clusterIP: 10.96.9.3
  ports: [{name: grpc, port: 9000}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: ns-0}
spec:
  selector: {matchLabels: {app: a}}
  action: CUSTOM
  provider: {name: authz}
  rules: [{}]
`))
	if err != nil {
		t.Fatal(err)
	}
	mesh, err := worldtest.MeshConfig("extensionProviders:\n- name: authz\n  envoyExtAuthzGrpc: {service: authz/ext-authz.authz.svc.cluster.local, port: 9000}\n")
	if err != nil {
		t.Fatal(err)
	}
	apply(t, store, append(evs, mesh)...)
	w := store.World()
	for app, uses := range map[string]bool{"a": true, "b": false} {
		p, err := model.ParseProxy("sidecar~10.0.0.1~x.ns-0~ns-0.svc.cluster.local", map[string]any{"LABELS": map[string]any{"app": app}})
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]bool{"ext-authz": uses, "private": false} {
			k := model.Key{Kind: model.KindService, Namespace: "authz", Name: name}
			if got := matters(t, k, p, w); got != want {
				t.Errorf("a change to authz/%s matters to the proxy app=%s of ns-0: %v, want %v", name, app, got, want)
			}
		}
	}
}

// A MeshConfig change that adds the provider a CUSTOM policy names turns
// the proxy's fail-closed DENY into the ext_authz filters, pushed at once.
func TestMeshConfigProviderReachesTheProxy(t *testing.T) {
	store := meshStore(t, 2)
	evs, err := worldtest.Decode([]byte(`
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: ns-0}
spec:
  action: CUSTOM
  provider: {name: authz}
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, store, evs...)
	ts := startServer(t, store)
	c := newSotwClient(t, dial(t, ts.addr), node("sidecar~10.1.0.1~svc-0-a.ns-0~ns-0.svc.cluster.local", map[string]any{"LABELS": map[string]any{"app": "svc-0"}}))
	c.send(gen.ClusterType, nil, "", "", "")
	c.ack(c.next(), nil)
	inbound := func() string {
		var out string
		ts.s.conns.Range(func(_, v any) bool {
			cn := v.(*conn)
			cn.mu.Lock()
			defer cn.mu.Unlock()
			if r := cn.cfg.Get(gen.ListenerType, gen.VirtualInbound); r != nil {
				js, err := protojson.Marshal(r.Any)
				if err != nil {
					t.Error(err)
				}
				out = string(js)
			}
			return false
		})
		return out
	}
	if l := inbound(); !strings.Contains(l, "deny-due-to-bad-CUSTOM-action") || strings.Contains(l, "ext_authz") {
		t.Fatalf("without the provider the inbound listener should deny, without ext_authz: %.300s", l)
	}
	mesh, err := worldtest.MeshConfig("extensionProviders:\n- name: authz\n  envoyExtAuthzGrpc: {service: svc-1.ns-1.svc.cluster.local, port: 7070}\n")
	if err != nil {
		t.Fatal(err)
	}
	apply(t, store, mesh)
	eventually(t, "the provider's ext_authz filter on the proxy", func() bool {
		l := inbound()
		return strings.Contains(l, "envoy.filters.http.ext_authz") && strings.Contains(l, "outbound|7070||svc-1.ns-1.svc.cluster.local") &&
			!strings.Contains(l, "deny-due-to-bad-CUSTOM-action")
	})
}
