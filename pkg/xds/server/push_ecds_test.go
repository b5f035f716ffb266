package server

import (
	"sort"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	httpwasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func wasmEvents(t *testing.T, ns, name, rv, selector, url string) []model.Event {
	t.Helper()
	sel := ""
	if selector != "" {
		sel = "  selector: {matchLabels: {app: " + selector + "}}\n"
	}
	evs, err := worldtest.Decode([]byte(`
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: ` + name + `, namespace: ` + ns + `, resourceVersion: "` + rv + `"}
spec:
` + sel + `  url: ` + url + `
  phase: AUTHN
`))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

const wasmExt = "extensions.istio.io/trafficextension/ns-0.auth~istio-translated-wasmplugin"

// A change to a WasmPlugin matters to the proxies it selects, in its
// namespace, and to no other.
func TestWasmPluginChangeMattersToTheProxiesItSelects(t *testing.T) {
	store := meshStore(t, 2)
	apply(t, store, wasmEvents(t, "ns-0", "auth", "1", "a", "oci://x/a:1")...)
	w := store.World()
	k := model.Key{Kind: model.KindWasmPlugin, Namespace: "ns-0", Name: "auth"}
	for _, tc := range []struct {
		ns, app string
		want    bool
	}{{"ns-0", "a", true}, {"ns-0", "b", false}, {"ns-1", "a", false}} {
		p, err := model.ParseProxy("sidecar~10.0.0.1~x."+tc.ns+"~"+tc.ns+".svc.cluster.local", map[string]any{"LABELS": map[string]any{"app": tc.app}})
		if err != nil {
			t.Fatal(err)
		}
		if got := matters(t, k, p, w); got != tc.want {
			t.Errorf("proxy app=%s in %s: ChangeMatters = %v, want %v", tc.app, tc.ns, got, tc.want)
		}
	}
}

// ecdsNames are the extension names the HTTP filters of listeners fetch
// over ECDS (config_discovery), as Envoy finds them.
func ecdsNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, a := range r.GetResources() {
		l := &listenerv3.Listener{}
		if err := a.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				m := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(m) != nil {
					continue
				}
				for _, h := range m.GetHttpFilters() {
					cd := h.GetConfigDiscovery()
					if cd == nil {
						continue
					}
					if cd.GetConfigSource().GetAds() == nil {
						t.Errorf("filter %s fetches its config from %v, want ADS", h.GetName(), cd.GetConfigSource())
					}
					seen[h.GetName()] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func extensionURL(t *testing.T, ec *corev3.TypedExtensionConfig) string {
	t.Helper()
	hw := &httpwasmv3.Wasm{}
	if err := ec.GetTypedConfig().UnmarshalTo(hw); err != nil {
		t.Fatalf("extension %s: %v", ec.GetName(), err)
	}
	return hw.GetConfig().GetVmConfig().GetCode().GetRemote().GetHttpUri().GetUri()
}

// An Envoy-style state-of-the-world client finds the extension names in
// its listeners, subscribes to them over ECDS and gets the plugin's
// extension; an edit of the plugin re-sends it; a proxy the plugin does
// not select gets nothing.
func TestECDSOverSotw(t *testing.T) {
	store := meshStore(t, 2)
	apply(t, store, wasmEvents(t, "ns-0", "auth", "1", "a", "oci://x/a:1")...)
	ts := startServer(t, store)
	connect := func(id, app string) (*sotwClient, *discovery.DiscoveryResponse) {
		c := newSotwClient(t, dial(t, ts.addr), node(id, map[string]any{"LABELS": map[string]any{"app": app}}))
		c.send(gen.ClusterType, nil, "", "", "")
		r := c.next()
		c.ack(r, nil)
		c.send(gen.ListenerType, nil, "", "", "")
		l := c.next()
		c.ack(l, nil)
		return c, l
	}
	a, la := connect("sidecar~10.9.0.1~a.ns-0~ns-0.svc.cluster.local", "a")
	want := ecdsNames(t, la)
	if joined(want) != wasmExt {
		t.Fatalf("listeners fetch extensions %v, want [%s]", want, wasmExt)
	}
	a.send(gen.ExtensionConfigType, want, "", "", "")
	r := a.next()
	if r.GetTypeUrl() != gen.ExtensionConfigType || len(r.GetResources()) != 1 {
		t.Fatalf("ECDS response: type %s, %d resources", r.GetTypeUrl(), len(r.GetResources()))
	}
	ec := &corev3.TypedExtensionConfig{}
	if err := r.GetResources()[0].UnmarshalTo(ec); err != nil {
		t.Fatal(err)
	}
	if ec.GetName() != wasmExt || extensionURL(t, ec) != "oci://x/a:1" {
		t.Errorf("extension %s fetches %s", ec.GetName(), extensionURL(t, ec))
	}
	a.ack(r, want)

	b, lb := connect("sidecar~10.9.0.2~b.ns-0~ns-0.svc.cluster.local", "b")
	if got := ecdsNames(t, lb); len(got) != 0 {
		t.Errorf("an unselected proxy's listeners fetch %v", got)
	}

	apply(t, store, wasmEvents(t, "ns-0", "auth", "2", "a", "oci://x/a:2")...)
	var ecdsResp *discovery.DiscoveryResponse
	for ecdsResp == nil {
		r := a.next()
		if r.GetTypeUrl() == gen.ExtensionConfigType {
			ecdsResp = r
			continue
		}
		a.ack(r, nil)
	}
	ec = &corev3.TypedExtensionConfig{}
	if err := ecdsResp.GetResources()[0].UnmarshalTo(ec); err != nil {
		t.Fatal(err)
	}
	if got := extensionURL(t, ec); got != "oci://x/a:2" {
		t.Errorf("after the edit the extension fetches %s, want oci://x/a:2", got)
	}
	select {
	case r := <-b.recv:
		t.Errorf("b, not selected, was pushed %s", r.GetTypeUrl())
	default:
	}
}

// A delta client subscribed to the extension gets it, and its removal
// when the plugin goes.
func TestECDSOverDelta(t *testing.T) {
	store := meshStore(t, 2)
	apply(t, store, wasmEvents(t, "ns-0", "auth", "1", "", "oci://x/a:1")...)
	ts := startServer(t, store)
	c := newDeltaClient(t, ts)
	n := node(sidecarID, nil)
	c.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: gen.ExtensionConfigType, ResourceNamesSubscribe: []string{wasmExt}})
	r := c.next()
	if joined(deltaNames(r)) != wasmExt {
		t.Fatalf("delta ECDS response holds %v", deltaNames(r))
	}
	c.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: gen.ExtensionConfigType, ResponseNonce: r.GetNonce()})
	apply(t, store, model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindWasmPlugin, Namespace: "ns-0", Name: "auth"}})
	for {
		r = c.next()
		if r.GetTypeUrl() == gen.ExtensionConfigType {
			break
		}
	}
	if joined(r.GetRemovedResources()) != wasmExt || len(r.GetResources()) != 0 {
		t.Errorf("after the plugin's deletion: removed %v, resources %v", r.GetRemovedResources(), deltaNames(r))
	}
}
