package file

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

func serviceEntry(name, host string) string {
	return "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: " + name +
		"\nspec:\n  hosts: ['" + host + "']\n  addresses: [10.0.0.1]\n  ports: [{number: 80, name: http}]\n  resolution: STATIC\n  endpoints: [{address: 10.1.1.1}]\n"
}

func TestParseReadsWhatIstioReads(t *testing.T) {
	cases := map[string]struct {
		doc     string
		problem string // "" means loaded
		warning string
	}{
		"Go-style durations (3m, 500ms, 1m30s)": {
			doc: "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\n" +
				"spec: {host: r, trafficPolicy: {outlierDetection: {baseEjectionTime: 3m, interval: 500ms}, connectionPool: {tcp: {connectTimeout: 1m30s}}}}",
		},
		"a ServiceEntry port without a protocol": {doc: serviceEntry("s", "a.example.com")},
		"a partial wildcard host, with Istio's warning": {
			doc: serviceEntry("s", "*x"), warning: `partial wildcard "*x"`,
		},
		"not a ServiceEntry host that is only *, which Istio refuses": {
			doc: serviceEntry("s", "*"), problem: "wildcard",
		},
		"not an unknown field in a spec": {
			doc:     "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\nspec: {host: r, hots: x}",
			problem: `unknown field "hots"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs, errs := Parse("f.yaml", []byte(tc.doc))
			if tc.problem != "" {
				if len(errs) != 1 || len(objs) != 0 || !strings.Contains(errs[0].Error(), tc.problem) {
					t.Fatalf("objects %d, errors %v; want one error saying %q", len(objs), errs, tc.problem)
				}
				return
			}
			if len(errs) != 0 || len(objs) != 1 {
				t.Fatalf("objects %d, errors %v; want the object loaded", len(objs), errs)
			}
			if got := strings.Join(objs[0].Warnings, "; "); !strings.Contains(got, tc.warning) || (tc.warning == "") != (got == "") {
				t.Fatalf("warnings %q, want %q", got, tc.warning)
			}
		})
	}
}

func TestParseDecodesGoDurations(t *testing.T) {
	objs, errs := Parse("f.yaml", []byte("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\nspec: {host: r, trafficPolicy: {outlierDetection: {baseEjectionTime: 3m}}}"))
	if len(errs) != 0 || len(objs) != 1 {
		t.Fatalf("objects %d, errors %v", len(objs), errs)
	}
	dr := objs[0].Object.(*networkingv1.DestinationRule)
	if got := dr.Spec.GetTrafficPolicy().GetOutlierDetection().GetBaseEjectionTime().AsDuration().String(); got != "3m0s" {
		t.Fatalf("baseEjectionTime = %s, want 3m0s", got)
	}
}

func TestAnObjectIstioRefusesKeepsThePreviousVersion(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	writeFile(t, a, serviceEntry("ext", "a.example.com"))
	h := start(t, dir)
	host := func() string {
		c := h.world().Config(model.KindServiceEntry, "default", "ext")
		if c == nil {
			return ""
		}
		return c.Object.(*networkingv1.ServiceEntry).Spec.GetHosts()[0]
	}
	if host() != "a.example.com" {
		t.Fatalf("ServiceEntry not loaded: %v", h.src.Errors())
	}

	// hosts: ["*"] decodes, but Istio's validation refuses it.
	h.waitReload(t, func() { writeFile(t, a, serviceEntry("ext", "*")) })
	errs := h.src.Errors()
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), a+":1: document 0: ") || !strings.Contains(errs[0].Error(), "wildcard") {
		t.Fatalf("errors = %v, want one for %s document 0 about the wildcard", errs, a)
	}
	if host() != "a.example.com" {
		t.Errorf("the refused version replaced the last good one: host %q", host())
	}
	logged := h.logs.records("config document not loaded")
	if len(logged) != 1 || logged[0]["file"] != a || logged[0]["doc"] != 0.0 || logged[0]["kept_previous"] != true {
		t.Errorf("log records = %v", logged)
	}
	if got := testutil.ToFloat64(h.src.metrics.errors); got != 1 {
		t.Errorf("errors gauge = %v, want 1", got)
	}
}
