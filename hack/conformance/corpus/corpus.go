// Package corpus gathers the suite's inputs: Istio's own samples and
// pilot fixtures from the pinned istio.io/istio module, discovery's golden
// inputs, and the suite's own cases (testdata/cases).
//
// In: the module directories. Out: Entries, each the objects of one input
// as written (plus the workloads a config-only fixture needs) and, for
// golden cases, the node they were written for.
package corpus

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// Sources of the corpus.
const (
	SourceSamples  = "istio samples"
	SourceFixtures = "istio pilot fixtures"
	SourceGoldens  = "discovery goldens"
	SourceCases    = "conformance cases"
)

// Entry is one input as gathered.
type Entry struct {
	Name    string
	Source  string
	Objects []*scenario.Object
	// Nodes are the proxies the input was written for (nil: let
	// scenario.Complete choose).
	Nodes []*scenario.Node
}

// Load gathers every source: istioDir is the pinned istio.io/istio
// module, repoDir this repository, casesDir the suite's own cases.
func Load(istioDir, repoDir, casesDir string) (out []Entry, err error) {
	defer func() {
		if err == nil {
			err = loopbackJWKS(out)
		}
	}()
	for _, load := range []func() ([]Entry, error){
		func() ([]Entry, error) { return Samples(istioDir) },
		func() ([]Entry, error) { return Fixtures(istioDir) },
		func() ([]Entry, error) { return Goldens(filepath.Join(repoDir, "pkg/xds/gen/testdata")) },
		func() ([]Entry, error) { return Cases(casesDir, filepath.Join(casesDir, "..", "platform.yaml")) },
	} {
		es, err := load()
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}

// loopbackJWKS refuses an input whose RequestAuthentication names a
// jwksUri (or, without one, an issuer to discover) off loopback: the
// in-process istiod fetches key sets, and the suite must not reach out
// of the machine. Inputs inline their keys (jwks) instead.
func loopbackJWKS(es []Entry) error {
	for _, e := range es {
		for _, o := range e.Objects {
			if o.Kind != "RequestAuthentication" {
				continue
			}
			rules, _ := o.Spec()["jwtRules"].([]any)
			for _, r := range rules {
				rule, _ := r.(map[string]any)
				if _, inline := rule["jwks"]; inline {
					continue
				}
				uri, _ := rule["jwksUri"].(string)
				if !strings.HasPrefix(uri, "http://127.0.0.1:") {
					return fmt.Errorf("%s %s: a JWT rule without jwks must name a loopback jwksUri (the in-process istiod fetches it), not %q", e.Name, o.Key(), uri)
				}
			}
		}
	}
	return nil
}

func readObjects(paths ...string) ([]*scenario.Object, error) {
	var out []*scenario.Object
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		objs, err := scenario.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// Goldens reads discovery's golden cases: testdata/<case>/input.yaml with
// the node of node.yaml.
func Goldens(dir string) ([]Entry, error) {
	ins, err := filepath.Glob(filepath.Join(dir, "*", "input.yaml"))
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, in := range ins {
		caseDir := filepath.Dir(in)
		objs, err := readObjects(in)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(filepath.Join(caseDir, "node.yaml"))
		if err != nil {
			return nil, err
		}
		var node struct {
			ID       string         `json:"id"`
			Metadata map[string]any `json:"metadata"`
			Locality *struct {
				Region  string `json:"region"`
				Zone    string `json:"zone"`
				SubZone string `json:"subZone"`
			} `json:"locality"`
		}
		if err := yaml.Unmarshal(data, &node); err != nil {
			return nil, fmt.Errorf("%s: %w", caseDir, err)
		}
		n, err := scenario.NodeFromID(node.ID, node.Metadata)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caseDir, err)
		}
		if l := node.Locality; l != nil {
			n.Locality = scenario.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}
		}
		out = append(out, Entry{Name: "golden:" + filepath.Base(caseDir), Source: SourceGoldens, Objects: objs, Nodes: []*scenario.Node{n}})
	}
	return out, nil
}

// Cases reads the suite's own cases: each file's configs on top of the
// platform's workloads, or alone when the file starts with "# standalone".
func Cases(dir, platform string) ([]Entry, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		paths := []string{platform, f}
		if bytes.HasPrefix(data, []byte("# standalone")) {
			paths = paths[1:]
		}
		objs, err := readObjects(paths...)
		if err != nil {
			return nil, err
		}
		out = append(out, Entry{Name: "case:" + strings.TrimSuffix(filepath.Base(f), ".yaml"), Source: SourceCases, Objects: objs})
	}
	return out, nil
}

// Fixtures reads pilot's config fixtures: configs without workloads, so
// the workloads they name are synthesized.
func Fixtures(istioDir string) ([]Entry, error) {
	var out []Entry
	add := func(pattern, proto string) error {
		files, err := filepath.Glob(filepath.Join(istioDir, pattern))
		if err != nil {
			return err
		}
		sort.Strings(files)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			if bytes.Contains(data, []byte("{{")) {
				if data, err = render(data); err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
			}
			objs, err := scenario.Parse(data)
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			rel, _ := filepath.Rel(istioDir, f)
			out = append(out, Entry{Name: "istio:" + rel, Source: SourceFixtures, Objects: Synthesize(objs, proto)})
		}
		return nil
	}
	for _, p := range []struct{ glob, proto string }{
		{"tests/testdata/config/*.yaml", "http"},
		{"tests/testdata/networking/*/configs.yaml", "http"},
		{"pilot/pkg/security/authz/builder/testdata/http/*-in.yaml", "http"},
		{"pilot/pkg/security/authz/builder/testdata/tcp/*-in.yaml", "tcp"},
		{"pilot/pkg/xds/testdata/benchmarks/*.yaml", "http"},
		{"pilot/pkg/xds/testdata/*.yaml", "http"},
	} {
		if err := add(p.glob, p.proto); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// render executes a benchmark template as pilot's benchmarks do, small:
// two services with two instances each.
func render(data []byte) ([]byte, error) {
	t, err := template.New("").Funcs(sprig.TxtFuncMap()).Parse(string(data))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, map[string]any{"Services": 2, "Instances": 2}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
