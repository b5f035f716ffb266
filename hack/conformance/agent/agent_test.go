// Package agent checks discovery's ECDS against Istio's agent: the
// extensions discovery generates for WasmPlugins go through the very code
// pilot-agent runs on every ECDS response (istio.io/istio/pkg/wasm,
// MaybeConvertWasmExtensionConfig) before Envoy sees them.
package agent

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httprbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	httpwasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"istio.io/istio/pkg/wasm"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// wasmModule is the smallest valid Wasm binary: magic and version.
var wasmModule = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

func plugin(name, url, extra string) string {
	return "---\napiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: " + name +
		", namespace: default, resourceVersion: \"3\"}\nspec:\n  url: " + url + "\n" + extra
}

// extensions generates the ECDS resources of a sidecar in default.
func extensions(t *testing.T, y string) map[string]*anypb.Any {
	t.Helper()
	objs, errs := file.Parse("mesh.yaml", []byte(y))
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	store := model.NewStore(model.StoreOptions{})
	for _, o := range objs {
		if _, err := store.Apply(model.Event{Op: model.OpUpsert, Key: o.Key, Object: o.Object}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := model.ParseProxy("sidecar~10.1.0.5~web-0.default~default.svc.cluster.local", nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gen.New(gen.DefaultOptions(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	w := store.World()
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(w, p, cc)
	out := map[string]*anypb.Any{}
	for _, n := range pc.Names(gen.ExtensionConfigType) {
		out[strings.TrimSuffix(strings.TrimPrefix(n, "extensions.istio.io/trafficextension/default."), "~istio-translated-wasmplugin")] = pc.Get(gen.ExtensionConfigType, n).Any
	}
	return out
}

func TestAgentRewritesDiscoverysExtensions(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok.wasm" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(wasmModule)
	}))
	defer srv.Close()
	exts := extensions(t, plugin("ok", srv.URL+"/ok.wasm", "  pluginConfig: {a: 1}\n  vmConfig: {env: [{name: KEEP, value: v}]}\n")+
		plugin("missing", srv.URL+"/missing.wasm", "")+
		plugin("missing-open", srv.URL+"/missing.wasm", "  failStrategy: FAIL_OPEN\n")+
		plugin("secret", srv.URL+"/ok.wasm", "  imagePullSecret: creds\n"))
	if len(exts) != 4 {
		t.Fatalf("extensions %v, want 4", exts)
	}
	cache := wasm.NewLocalFileCache(t.TempDir(), wasm.Options{HTTPRequestTimeout: 5 * time.Second, HTTPRequestMaxRetries: 1})
	defer cache.Cleanup()
	order := []string{"ok", "missing", "missing-open", "secret"}
	resources := make([]*anypb.Any, len(order))
	for i, n := range order {
		resources[i] = exts[n]
	}
	// The agent NACKs what it cannot convert at all; a failed fetch is
	// not that (it becomes an RBAC filter).
	if err := wasm.MaybeConvertWasmExtensionConfig(resources, cache); err != nil {
		t.Fatalf("the agent refuses discovery's extensions: %v", err)
	}
	decode := func(i int) *corev3.TypedExtensionConfig {
		ec := &corev3.TypedExtensionConfig{}
		if err := resources[i].UnmarshalTo(ec); err != nil {
			t.Fatal(err)
		}
		return ec
	}

	// Fetched: a local file, the agent's variables stripped, the
	// plugin's own kept, and valid for Envoy.
	ok := &httpwasmv3.Wasm{}
	if err := decode(0).GetTypedConfig().UnmarshalTo(ok); err != nil {
		t.Fatalf("ok: %v", err)
	}
	vm := ok.GetConfig().GetVmConfig()
	if vm.GetCode().GetLocal().GetFilename() == "" || vm.GetCode().GetRemote() != nil {
		t.Errorf("ok: code %v, want the local file the agent fetched", vm.GetCode())
	}
	for k := range vm.GetEnvironmentVariables().GetKeyValues() {
		if strings.HasPrefix(k, "ISTIO_META_") {
			t.Errorf("ok: the agent left %s for Envoy", k)
		}
	}
	if vm.GetEnvironmentVariables().GetKeyValues()["KEEP"] != "v" {
		t.Errorf("ok: env %v lost the plugin's variable", vm.GetEnvironmentVariables())
	}
	if err := decode(0).ValidateAll(); err != nil {
		t.Errorf("ok: %v", err)
	}
	if err := ok.ValidateAll(); err != nil {
		t.Errorf("ok: Envoy would refuse the rewritten filter: %v", err)
	}

	// Not fetched: FAIL_CLOSE (the default) denies every request, FAIL_OPEN
	// allows; an image pull secret discovery does not serve fails the
	// fetch, so it denies too.
	for i, want := range map[int]string{1: "deny", 2: "allow", 3: "deny"} {
		ec := decode(i)
		rb := &httprbacv3.RBAC{}
		if err := ec.GetTypedConfig().UnmarshalTo(rb); err != nil {
			t.Errorf("%s: %s, want the agent's %s RBAC filter", order[i], ec.GetTypedConfig().GetTypeUrl(), want)
			continue
		}
		got := "allow"
		if rb.GetRules() != nil {
			got = "deny" // rules with no policies: nothing is allowed
		}
		if got != want {
			t.Errorf("%s: the agent's stand-in would %s, want %s", order[i], got, want)
		}
	}
}
