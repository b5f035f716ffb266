package file

import (
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// A config directory carries every Istio kind, each in the versions Istio
// serves, judged as /validate judges it; the Store takes what it reads.
func TestParseEveryIstioKind(t *testing.T) {
	objs, errs := Parse("k.yaml", []byte(`apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: ef, namespace: default}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match: {context: SIDECAR_INBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.lua
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
          inlineCode: "function envoy_on_request(h) end"
---
apiVersion: networking.istio.io/v1beta1
kind: WorkloadGroup
metadata: {name: wg, namespace: default}
spec:
  metadata: {labels: {app: vm}}
  template: {serviceAccount: vm}
  probe: {httpGet: {port: 8080}}
---
apiVersion: networking.istio.io/v1beta1
kind: ProxyConfig
metadata: {name: pc, namespace: default}
spec: {concurrency: 2}
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: wp, namespace: default}
spec: {url: oci://ghcr.io/example/plugin:1, phase: AUTHN}
---
apiVersion: extensions.istio.io/v1alpha1
kind: TrafficExtension
metadata: {name: te, namespace: default}
spec: {lua: {inlineCode: "function envoy_on_request(h) end"}}
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: bad-type, namespace: default}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    patch: {operation: ADD, value: {name: x, typed_config: {"@type": type.googleapis.com/not.a.Type}}}
---
apiVersion: networking.istio.io/v1
kind: EnvoyFilter
metadata: {name: v1-not-served, namespace: default}
spec: {}
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: bad-url, namespace: default}
spec: {url: "ftp://example.com/p.wasm"}
`))
	want := []model.Kind{model.KindEnvoyFilter, model.KindWorkloadGroup, model.KindProxyConfig, model.KindWasmPlugin, model.KindTrafficExtension}
	if len(objs) != len(want) {
		t.Fatalf("objects %v, errors %v", objs, errs)
	}
	store := model.NewStore(model.StoreOptions{})
	for i, o := range objs {
		if o.Key.Kind != want[i] {
			t.Errorf("object %d is %v, want %s", i, o.Key, want[i])
		}
		if _, err := store.Apply(model.Event{Op: model.OpUpsert, Key: o.Key, Object: o.Object}); err != nil {
			t.Errorf("%v: %v", o.Key, err)
		}
	}
	if n := len(store.World().Configs(model.KindEnvoyFilter)); n != 1 {
		t.Errorf("%d EnvoyFilters in the World", n)
	}
	all := ""
	for _, e := range errs {
		all += e.Error() + "\n"
	}
	for _, msg := range []string{"referenced type unknown", `version "v1" is not served`, "unsupported scheme: ftp"} {
		if !strings.Contains(all, msg) {
			t.Errorf("errors lack %q:\n%s", msg, all)
		}
	}
	if len(errs) != 3 {
		t.Errorf("%d errors, want 3:\n%s", len(errs), all)
	}
}
