package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// The oracle: Istio's own CRDs, as its generator wrote them into the
// istio.io/istio module that hack/istio-tools pins (the Istio whose
// pilot-agent the compatibility tests run). They are read from the module
// cache to compare with, never copied.

// istioToolsDir is the module that pins istio.io/istio (and, through it,
// the istio.io/api Istio's CRDs were generated from).
const istioToolsDir = "../istio-tools"

// pinnedModuleDir returns the directory of module as hack/istio-tools
// requires it, downloading it if the cache lacks it. Without it the test
// fails, or is skipped under -short.
func pinnedModuleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = istioToolsDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &m)
	}
	if err == nil && m.Dir == "" {
		err = fmt.Errorf("no directory: %s", m.Error)
	}
	if err != nil {
		msg := fmt.Sprintf("%s as pinned by hack/istio-tools: go mod download: %v %s", module, err, strings.TrimSpace(stderr.String()))
		if testing.Short() {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	return m.Dir
}

func readCRDs(t *testing.T, path string) map[string]*apiextv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*apiextv1.CustomResourceDefinition{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
			continue
		}
		crd := &apiextv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal([]byte(doc), crd); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if crd.Name != "" {
			out[crd.Name] = crd
		}
	}
	return out
}

// difference is one place where a CRD of ours differs from Istio's.
type difference struct {
	kind, version, path, key string
	ours, istio              string
}

func (d difference) String() string {
	return fmt.Sprintf("%s %s %s %s: ours %s, Istio's %s", d.kind, d.version, d.path, d.key, d.ours, d.istio)
}

// explanation accounts for differences: those under the schema path
// segment under (".tls.alpnProtocols" matches every path that contains it
// and ends there or continues below it), or, with key, that key at paths
// ending in at. Added names a field that istio.io/api added after the
// version Istio's CRDs were generated from; the test checks that Istio's
// istio.io/api indeed lacks it.
type explanation struct {
	kind, under, at, key string
	added                protoreflect.FullName
	why                  string
}

func (e explanation) matches(d difference) bool {
	if d.kind != e.kind {
		return false
	}
	if e.at != "" {
		return strings.HasSuffix(d.path, e.at) && d.key == e.key
	}
	i := strings.Index(d.path, e.under)
	if i < 0 {
		return false
	}
	rest := d.path[i+len(e.under):]
	return rest == "" || strings.ContainsAny(rest[:1], ".[{")
}

const skew = "istio.io/api v1.32.0 (discovery's go.mod) adds the field; Istio's CRDs were generated from an earlier istio.io/api"

// explained lists every difference allowed, with its reason.
var explained = []explanation{
	{kind: "DestinationRule", under: ".loadBalancer.backendUtilization", added: "istio.networking.v1alpha3.LoadBalancerSettings.backend_utilization", why: skew},
	{
		kind: "DestinationRule", at: ".loadBalancer", key: "oneOf", added: "istio.networking.v1alpha3.LoadBalancerSettings.backend_utilization",
		why: skew + "; it is a member of the lb_policy oneof, so the oneOf has one more member",
	},
	{kind: "DestinationRule", under: ".outlierDetection.failurePercentageThreshold", added: "istio.networking.v1alpha3.OutlierDetection.failure_percentage_threshold", why: skew},
	{kind: "DestinationRule", under: ".tls.caCertCredentialName", added: "istio.networking.v1alpha3.ClientTLSSettings.ca_cert_credential_name", why: skew},
	{kind: "Gateway", under: ".tls.alpnProtocols", added: "istio.networking.v1alpha3.ServerTLSSettings.alpn_protocols", why: skew},
	{kind: "Gateway", under: ".tls.ecdhCurves", added: "istio.networking.v1alpha3.ServerTLSSettings.ecdh_curves", why: skew},
	{kind: "Sidecar", under: ".tls.alpnProtocols", added: "istio.networking.v1alpha3.ServerTLSSettings.alpn_protocols", why: skew},
	{kind: "Sidecar", under: ".tls.ecdhCurves", added: "istio.networking.v1alpha3.ServerTLSSettings.ecdh_curves", why: skew},
	{kind: "RequestAuthentication", under: ".jwtRules[].presence", added: "istio.security.v1beta1.JWTRule.presence", why: skew},
	{kind: "EnvoyFilter", under: ".filterChain.transportSocket", added: "istio.networking.v1alpha3.EnvoyFilter.ListenerMatch.FilterChainMatch.transport_socket", why: skew},
}

// TestValidationMatchesIstio compares, for every kind discovery's chart
// installs, the committed CRD (what the chart installs; its generation is
// checked by TestCommittedFileIsCurrent) with Istio's: names, scope,
// versions (served, storage, deprecation, subresources, columns) and, in
// every version, every schema node's constraints (type, format, enum,
// bounds, lengths, pattern, nullable, required, oneOf, anyOf, allOf, not,
// list types, int-or-string, preserve-unknown-fields, and each
// x-kubernetes-validations rule with its message, in order). Only
// descriptions are left out. Every difference must be explained.
func TestValidationMatchesIstio(t *testing.T) {
	ours := readCRDs(t, committed)
	if len(ours) != len(messages) {
		t.Fatalf("%s has %d CRDs, want %d", committed, len(ours), len(messages))
	}
	list := make([]*apiextv1.CustomResourceDefinition, 0, len(ours))
	for _, crd := range ours {
		list = append(list, crd)
	}
	compareWithIstio(t, list, explained)
}

// TestEveryIstioCRDIsInstalled checks that the chart installs a CRD for
// every CRD of Istio's base chart, so that any Istio object can be
// applied after discovery bootstrap (TestValidationMatchesIstio then
// compares each).
func TestEveryIstioCRDIsInstalled(t *testing.T) {
	ours := readCRDs(t, committed)
	theirs := readCRDs(t, filepath.Join(pinnedModuleDir(t, "istio.io/istio"), "manifests/charts/base/files/crd-all.gen.yaml"))
	var missing []string
	for name := range theirs {
		if _, ok := ours[name]; !ok {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("Istio's base chart installs CRDs that discovery's does not: %v", missing)
	}
	t.Logf("Istio's CRDs: %d, discovery's: %d", len(theirs), len(ours))
}

// compareWithIstio compares each CRD with Istio's of the same name and
// fails on a difference that no explanation accounts for, or an
// explanation that accounts for none.
func compareWithIstio(t *testing.T, ours []*apiextv1.CustomResourceDefinition, explained []explanation) {
	t.Helper()
	istioCRDs := readCRDs(t, filepath.Join(pinnedModuleDir(t, "istio.io/istio"), "manifests/charts/base/files/crd-all.gen.yaml"))
	istioAPI := newProtoSource(pinnedModuleDir(t, "istio.io/api"))
	sort.Slice(ours, func(i, j int) bool { return ours[i].Name < ours[j].Name })
	var diffs []difference
	for _, crd := range ours {
		theirs, ok := istioCRDs[crd.Name]
		if !ok {
			t.Errorf("Istio has no CRD %s", crd.Name)
			continue
		}
		d, stats := compareCRDs(crd, theirs)
		diffs = append(diffs, d...)
		t.Logf("%-22s x-kubernetes-validations rules: ours %3d, Istio's %3d; schema nodes compared %4d (ours %4d, Istio's %4d); differences (all versions) %d",
			crd.Spec.Names.Kind, stats.ourRules, stats.istioRules, stats.nodes, stats.ourNodes, stats.istioNodes, len(d))
	}
	used := make([]int, len(explained))
	for _, d := range diffs {
		found := false
		for i, e := range explained {
			if e.matches(d) {
				used[i]++
				found = true
				break
			}
		}
		if !found {
			t.Errorf("unexplained difference: %s", d)
		}
	}
	for i, e := range explained {
		switch {
		case used[i] == 0:
			t.Errorf("explanation matches no difference any more (remove it): %+v", e)
		case e.added != "":
			checkAdded(t, istioAPI, e.added)
		}
		where := e.under
		if e.at != "" {
			where = e.at + " " + e.key
		}
		t.Logf("explained: %s %s: %d difference(s): %s", e.kind, where, used[i], e.why)
	}
}

// checkAdded fails unless field is in discovery's istio.io/api and not in
// Istio's.
func checkAdded(t *testing.T, istioAPI *protoSource, field protoreflect.FullName) {
	t.Helper()
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(field)
	if err != nil {
		t.Errorf("explanation names %s, which discovery's istio.io/api lacks: %v", field, err)
		return
	}
	if _, err := istioAPI.comment(d); err == nil {
		t.Errorf("explanation says istio.io/api added %s after Istio's version, but Istio's has it", field)
	}
}

type crdStats struct {
	ourRules, istioRules, nodes, ourNodes, istioNodes int
}

func compareCRDs(ours, theirs *apiextv1.CustomResourceDefinition) ([]difference, crdStats) {
	kind := ours.Spec.Names.Kind
	var diffs []difference
	add := func(version, path, key string, a, b any) {
		ja, jb := canonical(a), canonical(b)
		if ja != jb {
			diffs = append(diffs, difference{kind: kind, version: version, path: path, key: key, ours: ja, istio: jb})
		}
	}
	add("", "", "group", ours.Spec.Group, theirs.Spec.Group)
	add("", "", "scope", ours.Spec.Scope, theirs.Spec.Scope)
	add("", "", "names", ours.Spec.Names, theirs.Spec.Names)
	versionsOf := func(c *apiextv1.CustomResourceDefinition) (out []string) {
		for _, v := range c.Spec.Versions {
			out = append(out, v.Name)
		}
		return out
	}
	add("", "", "versions", versionsOf(ours), versionsOf(theirs))

	var stats crdStats
	for _, ov := range ours.Spec.Versions {
		var tv *apiextv1.CustomResourceDefinitionVersion
		for i := range theirs.Spec.Versions {
			if theirs.Spec.Versions[i].Name == ov.Name {
				tv = &theirs.Spec.Versions[i]
			}
		}
		if tv == nil {
			continue // reported under versions
		}
		add(ov.Name, "", "served", ov.Served, tv.Served)
		add(ov.Name, "", "storage", ov.Storage, tv.Storage)
		add(ov.Name, "", "deprecated", ov.Deprecated, tv.Deprecated)
		add(ov.Name, "", "deprecationWarning", ov.DeprecationWarning, tv.DeprecationWarning)
		add(ov.Name, "", "subresources", ov.Subresources, tv.Subresources)
		add(ov.Name, "", "additionalPrinterColumns", ov.AdditionalPrinterColumns, tv.AdditionalPrinterColumns)
		on, tn := map[string]map[string]any{}, map[string]map[string]any{}
		flatten(ov.Schema.OpenAPIV3Schema, "", on)
		flatten(tv.Schema.OpenAPIV3Schema, "", tn)
		for path := range union(on, tn) {
			o, ok1 := on[path]
			th, ok2 := tn[path]
			if !ok1 || !ok2 {
				add(ov.Name, path, "(schema node)", ok1, ok2)
				continue
			}
			for key := range union(o, th) {
				add(ov.Name, path, key, o[key], th[key])
			}
		}
		if ov.Storage {
			stats = crdStats{ourRules: countRules(on), istioRules: countRules(tn), ourNodes: len(on), istioNodes: len(tn)}
			for path := range on {
				if _, ok := tn[path]; ok {
					stats.nodes++
				}
			}
		}
	}
	sort.Slice(diffs, func(i, j int) bool { return diffs[i].String() < diffs[j].String() })
	return diffs, stats
}

// flatten records, for s and every schema below it through properties,
// items and additionalProperties (paths like ".spec.http[].match[].headers{}"),
// the node's own constraints: every field but its description and its
// children, with descriptions removed from what remains.
func flatten(s *apiextv1.JSONSchemaProps, path string, out map[string]map[string]any) {
	node := *s
	node.Description, node.Properties, node.Items, node.AdditionalProperties = "", nil, nil, nil
	b, err := json.Marshal(node)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	out[path] = stripDescriptions(m).(map[string]any)
	for name, p := range s.Properties {
		flatten(&p, path+"."+name, out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		flatten(s.Items.Schema, path+"[]", out)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		flatten(s.AdditionalProperties.Schema, path+"{}", out)
	}
}

func stripDescriptions(v any) any {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "description")
		for k, e := range v {
			v[k] = stripDescriptions(e)
		}
	case []any:
		for i, e := range v {
			v[i] = stripDescriptions(e)
		}
	}
	return v
}

func countRules(nodes map[string]map[string]any) int {
	n := 0
	for _, c := range nodes {
		if rules, ok := c["x-kubernetes-validations"].([]any); ok {
			n += len(rules)
		}
	}
	return n
}

func union[V any](a, b map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// canonical is v as JSON, "absent" for nil.
func canonical(v any) string {
	if v == nil {
		return "absent"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	if string(b) == "null" {
		return "absent"
	}
	return string(b)
}

// TestComparisonSeesEachKindOfDifference changes a copy of a CRD in the
// ways that matter to a verdict and checks that compareCRDs reports each.
func TestComparisonSeesEachKindOfDifference(t *testing.T) {
	crd := readCRDs(t, committed)["serviceentries.networking.istio.io"]
	if crd == nil {
		t.Fatal("no ServiceEntry CRD")
	}
	if d, _ := compareCRDs(crd, crd.DeepCopy()); len(d) != 0 {
		t.Fatalf("a CRD differs from itself: %v", d)
	}
	other := crd.DeepCopy()
	v1 := other.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := v1.Properties["spec"]
	rules := spec.XValidations
	rules[0], rules[1] = rules[1], rules[0] // the order of the rules
	hosts := spec.Properties["hosts"]
	hosts.MaxItems = nil                             // a bound
	hosts.Items.Schema.XValidations[0].Message = "x" // a rule's message
	spec.Properties["hosts"] = hosts
	delete(spec.Properties, "location") // a field
	spec.Description = "descriptions do not count"
	v1.Properties["spec"] = spec
	other.Spec.Versions[1].Storage = !other.Spec.Versions[1].Storage

	d, _ := compareCRDs(crd, other)
	var got []string
	for _, x := range d {
		got = append(got, x.version+" "+x.path+" "+x.key)
	}
	want := []string{
		"v1 .spec x-kubernetes-validations",
		"v1 .spec.hosts maxItems",
		"v1 .spec.hosts[] x-kubernetes-validations",
		"v1 .spec.location (schema node)",
		"v1alpha3  storage",
	}
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("differences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
