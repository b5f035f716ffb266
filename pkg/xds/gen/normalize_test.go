package gen

import (
	"os"
	"path/filepath"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// Every HTTP connection manager an Envoy proxy gets normalizes paths
// (RFC 3986, Istio's default path normalization BASE) before RBAC and
// routing see them: without it a path DENY on a sidecar is sidestepped
// with /x/../admin. (Proxyless gRPC ignores the setting.)
func TestEveryConnectionManagerNormalizesPaths(t *testing.T) {
	dirs, err := filepath.Glob("testdata/*/node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, node := range dirs {
		dir := filepath.Dir(node)
		if _, err := os.Stat(filepath.Join(dir, "input.yaml")); err != nil {
			continue
		}
		w, p := loadCase(t, dir)
		if p.IsGRPC() {
			continue
		}
		pc := generate(t, w, p)
		for _, name := range pc.Names(ListenerType) {
			var l listenerv3.Listener
			if err := pc.Get(ListenerType, name).Any.UnmarshalTo(&l); err != nil {
				t.Fatal(err)
			}
			for _, fc := range append(l.FilterChains, l.DefaultFilterChain) {
				for _, f := range fc.GetFilters() {
					var m hcmv3.HttpConnectionManager
					if f.GetTypedConfig().MessageIs(&m) {
						if err := f.GetTypedConfig().UnmarshalTo(&m); err != nil {
							t.Fatal(err)
						}
						seen++
						if !m.GetNormalizePath().GetValue() {
							t.Errorf("%s: listener %s, chain %q: the connection manager %s does not normalize paths", dir, name, fc.GetName(), m.StatPrefix)
						}
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no connection manager found in the goldens' worlds")
	}
}
