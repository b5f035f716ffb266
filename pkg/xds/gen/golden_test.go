package gen

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var goldenFiles = map[string]string{
	ClusterType: "clusters", EndpointType: "endpoints", ListenerType: "listeners", RouteType: "routes",
	ExtensionConfigType: "extensionconfigs",
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newForTest is a Generator with DefaultOptions logging to log.
func newForTest(log *slog.Logger) *Generator {
	g, err := New(DefaultOptions(log))
	if err != nil {
		panic(err)
	}
	return g
}

// loadCase reads testdata/<name>: input.yaml into a World and node.yaml
// into a Proxy.
func loadCase(t *testing.T, dir string) (*model.World, *model.Proxy) {
	t.Helper()
	store, err := worldtest.LoadFile(filepath.Join(dir, "input.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "node.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var node struct {
		ID       string         `json:"id"`
		Metadata map[string]any `json:"metadata"`
		// Locality is the xDS node's (the server's parseNode).
		Locality *struct {
			Region  string `json:"region"`
			Zone    string `json:"zone"`
			SubZone string `json:"subZone"`
		} `json:"locality"`
	}
	if err := yaml.Unmarshal(data, &node); err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy(node.ID, node.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if l := node.Locality; l != nil {
		p.NodeLocality = model.Locality{Region: l.Region, Zone: l.Zone, Subzone: l.SubZone}
	}
	return store.World(), p
}

func generate(t *testing.T, w *model.World, p *model.Proxy) *ProxyConfig {
	t.Helper()
	g := newForTest(quietLog())
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(w, p, cc)
	readsOnlyActedOnKinds(t, pc)
	return pc
}

// readsOnlyActedOnKinds fails when generation read an Istio kind that
// ReadsKind (the unsupported-field table, which status and the webhook
// report from) says discovery does not act on: the two must agree.
func readsOnlyActedOnKinds(t testing.TB, pc *ProxyConfig) {
	t.Helper()
	kinds := pc.Class.Reads().Kinds()
	for k := range pc.OwnReads().Kinds() {
		kinds[k] = true
	}
	for k := range kinds {
		if k.IsIstio() && !ReadsKind(k) {
			t.Errorf("generation read %s, which ReadsKind says discovery does not act on", k)
		}
	}
}

// render turns every resource of typeURL into indented JSON, by name.
func render(t *testing.T, pc *ProxyConfig, typeURL string) []byte {
	t.Helper()
	var out []any
	for _, name := range pc.Names(typeURL) {
		m, err := pc.Get(typeURL, name).Any.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		js, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(js, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/*/input.yaml")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, in := range dirs {
		dir := filepath.Dir(in)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			w, p := loadCase(t, dir)
			pc := generate(t, w, p)
			for typeURL, file := range goldenFiles {
				got := render(t, pc, typeURL)
				path := filepath.Join(dir, file+".golden.json")
				if typeURL == ExtensionConfigType && pc.Len(typeURL) == 0 {
					// Only the cases with WasmPlugins have one.
					if _, err := os.Stat(path); err != nil {
						continue
					}
				}
				if *update {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update to create it)", err)
				}
				if !jsonEqual(t, got, want) {
					t.Errorf("%s differs from the generated %s (run go test -update and review the diff):\n%s", path, file, got)
				}
			}
			if !p.IsGRPC() {
				assertSnapshotConsistent(t, pc)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

// assertSnapshotConsistent runs go-control-plane's own consistency check
// on everything an Envoy proxy is sent.
func assertSnapshotConsistent(t *testing.T, pc *ProxyConfig) {
	t.Helper()
	res := map[string][]types.Resource{}
	for _, typeURL := range TypeURLs {
		for _, name := range pc.Names(typeURL) {
			m, err := pc.Get(typeURL, name).Any.UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			res[typeURL] = append(res[typeURL], m.(types.Resource))
		}
	}
	snap, err := cachev3.NewSnapshot("1", res)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Consistent(); err != nil {
		t.Errorf("snapshot not consistent: %v", err)
	}
}
