package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/meshplane/discovery/manifests"
	"github.com/meshplane/discovery/pkg/webhook/inject"
)

func TestParsePath(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    string // re-printed path
		steps   int
		wantErr string
	}{
		"accepts plain dotted fields":                  {in: "values.global.hub", want: "values.global.hub", steps: 3},
		"accepts a list index":                         {in: "components.ingressGateways.[0].enabled", want: "components.ingressGateways.[0].enabled", steps: 4},
		"accepts a list element chosen by a field":     {in: "components.ingressGateways.[name:gw].k8s", want: "components.ingressGateways.[name:gw].k8s", steps: 4},
		"keeps an escaped dot inside a field name":     {in: `k8s.podAnnotations.sidecar\.istio\.io/inject`, want: `k8s.podAnnotations.sidecar\.istio\.io/inject`, steps: 3},
		"refuses an empty path":                        {in: "", wantErr: "empty path"},
		"refuses two dots in a row":                    {in: "a..b", wantErr: "empty step"},
		"refuses a trailing dot":                       {in: "a.b.", wantErr: "empty step"},
		"refuses a negative index":                     {in: "a.[-1]", wantErr: "non-negative"},
		"refuses an index that is not a number":        {in: "a.[x]", wantErr: "non-negative"},
		"accepts istioctl's brackets glued to a field": {in: "a[0].b[name:x]", want: "a.[0].b.[name:x]", steps: 4},
		"accepts a match on a list of scalars":         {in: "a.[:x]", want: "a.[:x]", steps: 2},
		"keeps dots inside brackets":                   {in: "webhooks.[name:a.b.c].x", want: "webhooks.[name:a.b.c].x", steps: 3},
		"refuses text after a bracket":                 {in: "a[0]b", wantErr: "want [INDEX]"},
		"refuses an unterminated bracket":              {in: "a.[0", wantErr: "want [INDEX]"},
		"refuses a match without a value":              {in: "a.[name:]", wantErr: "non-empty value"},
		"refuses a path that starts with a list":       {in: "[0].a", wantErr: "must start with a field"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := ParsePath(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.String() != tc.want || len(p) != tc.steps {
				t.Errorf("got %q (%d steps), want %q (%d)", p, len(p), tc.want, tc.steps)
			}
		})
	}
}

func load(t *testing.T, in Input) (*Spec, error) {
	t.Helper()
	return LoadSpec(manifests.FS, in)
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadSpecRefusesBadInput(t *testing.T) {
	tests := map[string]struct {
		in      Input
		file    string
		wantErr []string
	}{
		"an unknown --set path names it and suggests the closest field": {
			in:      Input{Sets: []string{"components.pilot.k8s.replicaCont=2"}},
			wantErr: []string{"components.pilot.k8s.replicaCont", `did you mean components.pilot.k8s.replicaCount?`},
		},
		"an unknown top-level --set field suggests the closest": {
			in:      Input{Sets: []string{"revison=canary"}},
			wantErr: []string{`unknown field "revison"`, "did you mean revision?"},
		},
		"a --set of the wrong type is refused": {
			in:      Input{Sets: []string{"components.pilot.k8s.replicaCount=three"}},
			wantErr: []string{"components.pilot.k8s.replicaCount", "want an integer"},
		},
		"a --set boolean that is not one is refused": {
			in:      Input{Sets: []string{"components.pilot.enabled=yes please"}},
			wantErr: []string{"want a boolean"},
		},
		"a --set into a scalar as if it were an object is refused": {
			in:      Input{Sets: []string{"hub.registry=x"}},
			wantErr: []string{"hub has no fields"},
		},
		"an unknown mesh config field is refused": {
			in:      Input{Sets: []string{"meshConfig.accessLogFil=/dev/stdout"}},
			wantErr: []string{"meshConfig", "not a valid Istio MeshConfig"},
		},
		"an unknown profile suggests the closest": {
			in:      Input{Profile: "minimall"},
			wantErr: []string{`unknown profile "minimall"`, `did you mean "minimal"?`},
		},
		"a file with an unknown field names the file and the path": {
			file:    "apiVersion: install.istio.io/v1alpha1\nkind: IstioOperator\nspec:\n  components:\n    pilot:\n      k8s:\n        resources:\n          request:\n            cpu: 1\n",
			wantErr: []string{"in.yaml", "spec.components.pilot.k8s.resources.request", "did you mean spec.components.pilot.k8s.resources.requests?"},
		},
		"a file with a number where a string belongs is refused": {
			file:    "apiVersion: install.istio.io/v1alpha1\nkind: IstioOperator\nspec:\n  revision: 1.32\n",
			wantErr: []string{"spec.revision", "want a string", "the number 1.32"},
		},
		"a file of another kind is refused": {
			file:    "apiVersion: v1\nkind: ConfigMap\n",
			wantErr: []string{"want apiVersion install.istio.io/v1alpha1 and kind IstioOperator"},
		},
		"a bad quantity is refused": {
			in:      Input{Sets: []string{"components.pilot.k8s.resources.requests.cpu=lots"}},
			wantErr: []string{"components.pilot.k8s.resources.requests.cpu", "invalid Quantity"},
		},
		"an index past the end of a list is refused": {
			in:      Input{Sets: []string{"components.ingressGateways.[5].enabled=true"}},
			wantErr: []string{"[5]", "the list has 1 elements"},
		},
		"every problem is reported at once": {
			in:      Input{Sets: []string{"hubb=x", "tagg=y"}},
			wantErr: []string{`"hubb"`, `"tagg"`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := tc.in
			if tc.file != "" {
				in.Files = []string{writeFile(t, tc.file)}
			}
			_, err := load(t, in)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadSpecMergeOrder(t *testing.T) {
	f := writeFile(t, "apiVersion: install.istio.io/v1alpha1\nkind: IstioOperator\nspec:\n  profile: demo\n  hub: from-file\n  tag: file\n")
	in := Input{Profile: "minimal", Files: []string{f}, Sets: []string{"tag=1.0", "components.pilot.k8s.resources.requests.cpu=250m", `components.pilot.k8s.podAnnotations.example\.com/team=mesh`}, Revision: "canary"}
	s, err := load(t, in)
	if err != nil {
		t.Fatal(err)
	}
	g := s.Values.Global
	if g.Hub != "from-file" || g.Tag != "1.0" || s.Revision != "canary" || s.Values.Revision != "canary" {
		t.Errorf("hub %q tag %q revision %q: want from-file, 1.0 (--set wins, kept a string), canary", g.Hub, g.Tag, s.Revision)
	}
	// The file's profile (demo) wins over --profile: demo turns the egress gateway on.
	if len(s.Components.EgressGateways) != 1 || !enabledOr(s.Components.EgressGateways[0].Enabled, true) {
		t.Errorf("egress gateways %+v: want demo's", s.Components.EgressGateways)
	}
	m, err := Render(renderOpts(), in)
	if err != nil {
		t.Fatal(err)
	}
	d := renderedObject(m, "Deployment/discovery-canary")
	if d == nil {
		t.Fatal("no Deployment discovery-canary")
	}
	for at, want := range map[string]string{
		discoveryContainer + ".resources.requests.cpu":         "250m",
		discoveryContainer + ".resources.requests.memory":      "100Mi", // demo's, kept beside the --set cpu
		discoveryContainer + ".image":                          "from-file/discovery:1.0",
		`spec.template.metadata.annotations.example\.com/team`: "mesh",
	} {
		if err := (effect{obj: "Deployment/discovery-canary", at: at, eq: want}).check(m); err != nil {
			t.Error(err)
		}
	}
}

func TestSetAddsAGatewayByIndexNotByName(t *testing.T) {
	s, err := load(t, Input{Sets: []string{
		"components.ingressGateways[1].name=edge",
		"components.ingressGateways[name:edge].label.istio=edge",
	}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range s.Components.IngressGateways {
		names = append(names, g.Name)
	}
	if strings.Join(names, ",") != "istio-ingressgateway,edge" || s.Components.IngressGateways[1].Label["istio"] != "edge" {
		t.Errorf("gateways %+v", s.Components.IngressGateways)
	}
	_, err = load(t, Input{Sets: []string{"components.ingressGateways[name:edge].enabled=true"}})
	if err == nil || !strings.Contains(err.Error(), "[name:edge] selects no element (names: istio-ingressgateway); to add one, use the index [1]") {
		t.Errorf("err = %v", err)
	}
}

func TestRenderRefusesRemoteWithoutAddress(t *testing.T) {
	_, err := Render(renderOpts(), Input{Profile: "remote"})
	if err == nil || !strings.Contains(err.Error(), "values.global.remotePilotAddress") {
		t.Fatalf("err = %v", err)
	}
}

func TestEveryProfileLoads(t *testing.T) {
	names, err := Profiles(manifests.FS)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "default,demo,empty,minimal,remote" {
		t.Fatalf("profiles %v", names)
	}
	for _, n := range names {
		in := Input{Profile: n}
		if n == "remote" {
			in.Sets = []string{"values.global.remotePilotAddress=discovery.example.com"}
		}
		if _, err := load(t, in); err != nil {
			t.Errorf("profile %s: %v", n, err)
		}
	}
}

func TestMerge(t *testing.T) {
	tests := map[string]struct{ base, over, want string }{
		"objects merge key by key":           {`{"a":{"b":1,"c":2}}`, `{"a":{"c":3}}`, `{"a":{"b":1,"c":3}}`},
		"null removes a key":                 {`{"a":1,"b":2}`, `{"a":null}`, `{"b":2}`},
		"named lists merge by name":          {`{"l":[{"name":"x","v":1},{"name":"y"}]}`, `{"l":[{"name":"x","w":2},{"name":"z"}]}`, `{"l":[{"name":"x","v":1,"w":2},{"name":"y"},{"name":"z"}]}`},
		"other lists are replaced":           {`{"l":[1,2,3]}`, `{"l":[4]}`, `{"l":[4]}`},
		"a scalar replaces an object":        {`{"a":{"b":1}}`, `{"a":"s"}`, `{"a":"s"}`},
		"an empty overlay changes nothing":   {`{"a":{"b":[1]}}`, `{}`, `{"a":{"b":[1]}}`},
		"an object replaces a scalar wholly": {`{"a":1}`, `{"a":{"b":1}}`, `{"a":{"b":1}}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var base, over, want any
			for _, p := range []struct {
				s string
				v *any
			}{{tc.base, &base}, {tc.over, &over}, {tc.want, &want}} {
				if err := json.Unmarshal([]byte(p.s), p.v); err != nil {
					t.Fatal(err)
				}
			}
			baseCopy := deepCopy(base)
			got := merge(base, over)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("merge = %v, want %v", got, want)
			}
			if !reflect.DeepEqual(base, baseCopy) {
				t.Error("merge modified its base")
			}
		})
	}
}

// The istio-sidecar-injector ConfigMap carries the templates that
// pkg/webhook/inject embeds: the chart's copies must stay equal to them.
func TestInjectorTemplatesMatchWebhook(t *testing.T) {
	m, err := Render(renderOpts(), Input{})
	if err != nil {
		t.Fatal(err)
	}
	var config, values string
	for _, o := range m.Objects() {
		if o.GetKind() == "ConfigMap" && o.GetName() == "istio-sidecar-injector" {
			data := o.Object["data"].(map[string]any)
			config, values = data["config"].(string), data["values"].(string)
		}
	}
	if config == "" {
		t.Fatal("no istio-sidecar-injector ConfigMap rendered")
	}
	got, err := inject.ParseConfig([]byte(config))
	if err != nil {
		t.Fatalf("the injector refuses the chart's config: %v", err)
	}
	want, err := inject.DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Templates, want.Templates) {
		t.Error("manifests/charts/discovery/files/injection differs from pkg/webhook/inject/templates: copy them over")
	}
	if !reflect.DeepEqual(got.DefaultTemplates, want.DefaultTemplates) || got.Policy != want.Policy {
		t.Errorf("policy %s / defaults %v, want %s / %v", got.Policy, got.DefaultTemplates, want.Policy, want.DefaultTemplates)
	}
	v, err := inject.ParseValues([]byte(values))
	if err != nil {
		t.Fatalf("the injector refuses the chart's values: %v", err)
	}
	if v.String("global.hub") != "docker.io/istio" || v.String("global.istioNamespace") != "istio-system" {
		t.Errorf("values: hub %q namespace %q", v.String("global.hub"), v.String("global.istioNamespace"))
	}
}
