package dataplane

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

func ecdsHTTP(name string) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_ConfigDiscovery{ConfigDiscovery: &corev3.ExtensionConfigSource{}}}
}

// withWasm is istiodShape with ECDS filters (WasmPlugins) on its HTTP
// chain: network ones before the connection manager, HTTP ones in it.
func withWasm(t *testing.T, network []string, http ...string) *Config {
	cfg := istiodShape(t)
	var hf []*hcmv3.HttpFilter
	for _, n := range http {
		hf = append(hf, ecdsHTTP(n))
	}
	chain := httpChain(t, "", hcm(t, "9080", hf...))
	var nf []*listenerv3.Filter
	for _, n := range network {
		nf = append(nf, &listenerv3.Filter{Name: n, ConfigType: &listenerv3.Filter_ConfigDiscovery{ConfigDiscovery: &corev3.ExtensionConfigSource{}}})
	}
	chain.Filters = append(nf, chain.Filters...)
	cfg.Listeners[1] = portListener("0.0.0.0_9080", "0.0.0.0", 9080, chain)
	return cfg
}

func TestECDSFiltersAreFactsInOrder(t *testing.T) {
	req := reviewsRequests()["split"]
	facts := func(c *Config) string { return strings.Join(Evaluate(c, req).Facts(), "\n") }
	a := facts(withWasm(t, []string{"n"}, "x", "y"))
	for _, want := range []string{"policy: wasm http: x > y", "policy: wasm network: n"} {
		if !strings.Contains(a, want) {
			t.Errorf("facts lack %q:\n%s", want, a)
		}
	}
	if b := facts(withWasm(t, []string{"n"}, "y", "x")); b == a {
		t.Error("the order of ECDS filters makes no difference")
	}
	if b := facts(withWasm(t, nil, "x", "y")); b == a {
		t.Error("a missing network ECDS filter makes no difference")
	}
	if got := DiffByAspect(Evaluate(withWasm(t, nil, "x"), req), Evaluate(withWasm(t, nil), req)); len(got[Security]) == 0 {
		t.Errorf("a missing ECDS filter is not a security difference: %v", got)
	}
	if plain := facts(istiodShape(t)); strings.Contains(plain, "wasm") {
		t.Errorf("facts of a configuration without ECDS filters name wasm:\n%s", plain)
	}
}
