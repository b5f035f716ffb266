package helmcharts

import (
	"bufio"
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// The charts are usable with plain Helm: `helm lint --strict` and
// `helm template` of each chart directory, with nothing but its own
// values.yaml, run through Helm's own packages (there is no helm binary
// here), as `helm install discovery manifests/charts/discovery -n
// istio-system` would.

const chartsDir = "../../manifests/charts"

var chartNames = []string{"base", "discovery", "gateway"}

func TestHelmLintStrict(t *testing.T) {
	for _, name := range chartNames {
		t.Run(name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict = true
			l.Namespace = "istio-system"
			res := l.Run([]string{filepath.Join(chartsDir, name)}, map[string]any{})
			for _, m := range res.Messages {
				t.Logf("%s", m)
			}
			if len(res.Errors) > 0 || action.HasWarningsOrErrors(res) {
				t.Errorf("helm lint --strict: %v", res.Errors)
			}
		})
	}
}

// helmTemplate renders a chart directory as `helm template` does.
func helmTemplate(t *testing.T, name, release string, vals map[string]any) (string, error) {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(chartsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: &bytes.Buffer{}},
		Capabilities: chartutil.DefaultCapabilities,
	}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly, inst.Replace, inst.IncludeCRDs = true, true, true, true
	inst.ReleaseName, inst.Namespace = release, "istio-system"
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// TestHelmTemplateDefaults: each chart renders with its own defaults, and
// every object is a valid Kubernetes object with a proper name.
func TestHelmTemplateDefaults(t *testing.T) {
	for _, name := range chartNames {
		t.Run(name, func(t *testing.T) {
			out, err := helmTemplate(t, name, "istio-"+name, nil)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			objs := splitObjects(t, out)
			if len(objs) == 0 {
				t.Fatal("no objects")
			}
			for _, o := range objs {
				n, _ := nameOf(o).(string)
				if n == "" || strings.HasPrefix(n, "-") || strings.HasSuffix(n, "-") || strings.Contains(n, "--") {
					t.Errorf("%s named %q", o["kind"], n)
				}
				strictDecode(t, o)
			}
		})
	}
}

// strictDecode decodes an object into its typed Go form, refusing
// unknown fields, as the API server's strict field validation would.
func strictDecode(t *testing.T, obj map[string]any) {
	t.Helper()
	gvk, ok := obj["apiVersion"].(string)
	if !ok {
		t.Fatalf("no apiVersion: %v", obj)
	}
	b, err := stdjson.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{Strict: true})
	if _, _, err := s.Decode(b, nil, nil); err != nil && !runtime.IsNotRegisteredError(err) {
		t.Errorf("%s %s/%s: %v", gvk, obj["kind"], nameOf(obj), err)
	}
}

func nameOf(obj map[string]any) any {
	md, _ := obj["metadata"].(map[string]any)
	return md["name"]
}

// splitObjects parses a multi-document YAML stream, skipping empty
// documents.
func splitObjects(t *testing.T, s string) []map[string]any {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var out []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if len(m) > 0 {
			out = append(out, m)
		}
	}
}

// find returns the object kind/name of a rendered stream.
func find(t *testing.T, objs []map[string]any, kind, name string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == kind && nameOf(o) == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

// dig walks keys through decoded YAML, list elements chosen by name.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			v = nil
			for _, e := range x {
				if m, ok := e.(map[string]any); ok && m["name"] == k {
					v = m
				}
			}
		default:
			return nil
		}
	}
	return v
}

// helmInstall renders as `helm install --dry-run` and returns the manifest
// and the notes.
func helmInstall(t *testing.T, name, release string, vals map[string]any) (string, string, error) {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(chartsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: &bytes.Buffer{}},
		Capabilities: chartutil.DefaultCapabilities,
	}
	inst := action.NewInstall(cfg)
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = release, "istio-system"
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return "", "", err
	}
	return rel.Manifest, rel.Info.Notes, nil
}

func parseSets(t *testing.T, sets ...string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			t.Fatal(err)
		}
	}
	return vals
}

// TestHelmTakesIstiosValues: the values Istio's istiod and gateway charts
// take for the same settings, given with --set as helm takes them.
func TestHelmTakesIstiosValues(t *testing.T) {
	out, notes, err := helmInstall(t, "discovery", "discovery", parseSets(t,
		"global.hub=registry.example.com/mesh", "global.tag=1.2.3",
		"pilot.autoscaleEnabled=false", "pilot.replicaCount=2", "pilot.resources.requests.cpu=1",
		"pilot.env.HTTPS_PROXY=http://proxy:3128", "meshConfig.trustDomain=example.org",
		"global.logging.level=default:debug", "sidecarInjectorWebhook.enableNamespacesByDefault=true",
		"revision=canary", "global.proxy.privileged=true"))
	if err != nil {
		t.Fatal(err)
	}
	objs := splitObjects(t, out)
	d := find(t, objs, "Deployment", "discovery-canary")
	c := dig(d, "spec", "template", "spec", "containers", "discovery")
	if img := dig(c, "image"); img != "registry.example.com/mesh/discovery:1.2.3" {
		t.Errorf("image %v", img)
	}
	if n := dig(d, "spec", "replicas"); n != float64(2) {
		t.Errorf("replicas %v", n)
	}
	args := fmt.Sprint(dig(c, "args"))
	for _, want := range []string{"--revision=canary", "--trust-domain=example.org", "--log-level=debug"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %s lack %s", args, want)
		}
	}
	if v := dig(c, "env", "HTTPS_PROXY", "value"); v != "http://proxy:3128" {
		t.Errorf("env %v", dig(c, "env"))
	}
	find(t, objs, "PodDisruptionBudget", "discovery-canary")
	cm := find(t, objs, "ConfigMap", "istio-sidecar-injector-canary")
	var injector map[string]any
	if err := yaml.Unmarshal([]byte(dig(cm, "data", "values").(string)), &injector); err != nil {
		t.Fatal(err)
	}
	if hub, tag := dig(injector, "global", "hub"), dig(injector, "global", "tag"); hub != "registry.example.com/mesh" || tag != "1.2.3" {
		t.Errorf("the proxies' image: hub %v tag %v, want global.hub and global.tag", hub, tag)
	}
	if !strings.Contains(notes, "WARNING: global.proxy.privileged: accepted, but has no effect in discovery") {
		t.Errorf("notes do not warn about global.proxy.privileged:\n%s", notes)
	}

	out, _, err = helmInstall(t, "gateway", "istio-ingress", parseSets(t, "service.type=NodePort", "autoscaling.enabled=false", "replicaCount=3", "labels.istio=ingress"))
	if err != nil {
		t.Fatal(err)
	}
	objs = splitObjects(t, out)
	svc := find(t, objs, "Service", "istio-ingress")
	if dig(svc, "spec", "type") != "NodePort" || dig(svc, "spec", "selector", "istio") != "ingress" {
		t.Errorf("Service %v", svc["spec"])
	}
	if n := dig(find(t, objs, "Deployment", "istio-ingress"), "spec", "replicas"); n != float64(3) {
		t.Errorf("replicas %v", n)
	}
	find(t, objs, "ServiceAccount", "istio-ingress-service-account")
}

// TestHelmRefusesWhatDiscoveryDoesNot: values.schema.json refuses what the
// installer refuses by type, naming the value.
func TestHelmRefusesWhatDiscoveryDoesNot(t *testing.T) {
	tests := map[string]struct {
		chart string
		sets  []string
		want  string
	}{
		"an unknown value":                       {"discovery", []string{"pilot.autoscaleEnabeld=false"}, "autoscaleEnabeld"},
		"a value of the wrong type":              {"discovery", []string{"pilot.autoscaleMin=many"}, "autoscaleMin"},
		"a log level the server refuses":         {"discovery", []string{"pilot.logLevel=verbose"}, "logLevel"},
		"an Istio value discovery cannot honour": {"discovery", []string{"global.mountMtlsCerts=true"}, "mountMtlsCerts"},
		"Istio's CNI":                            {"discovery", []string{"pilot.cni.enabled=true"}, "cni"},
		"the installer's gateway values":         {"discovery", []string{"gateways.istio-ingressgateway.type=NodePort"}, "gateways"},
		"Istio's profile, which the charts lack": {"discovery", []string{"profile=demo"}, "profile"},
		"a gateway as a DaemonSet":               {"gateway", []string{"kind=DaemonSet"}, "kind"},
		"a bad Service type":                     {"gateway", []string{"service.type=Public"}, "type"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := helmInstall(t, tc.chart, "x", parseSets(t, tc.sets...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}
