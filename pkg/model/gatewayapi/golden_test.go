package gatewayapi

import (
	"bytes"
	"crypto/tls"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	gw "sigs.k8s.io/gateway-api/apis/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestGolden translates testdata/<case>/input.yaml (Gateway API objects,
// Services and Namespaces) and compares the Istio configs and reports
// with output.golden.yaml.
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/*/input.yaml")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, in := range dirs {
		dir := filepath.Dir(in)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := render(t, Translate(readInput(t, in)))
			golden := filepath.Join(dir, "output.golden.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the translation (run with -update to accept):\n%s", golden, got)
			}
		})
	}
}

func readInput(t *testing.T, path string) Input {
	t.Helper()
	data := mustRead(t, path)
	var secrets map[[2]string]CertificateState // nil: Secrets not read, as without the credentials informer
	if bytes.Contains(data, []byte("\nkind: Secret\n")) {
		secrets = map[[2]string]CertificateState{}
	}
	return decodeInput(t, data, secrets, false)
}

// decodeInput reads the objects of data; secrets (filled with the
// Secrets read) answers Input.Secret when not nil. Kinds the translation
// does not read fail the test unless lenient.
func decodeInput(t *testing.T, data []byte, secrets map[[2]string]CertificateState, lenient bool) Input {
	t.Helper()
	in := Input{DomainSuffix: "cluster.local", Namespaces: map[string]map[string]string{}}
	svcs := map[[2]string]Service{}
	cms := map[[2]string]map[string]string{}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if raw == nil {
			continue
		}
		js, _ := sigsyaml.Marshal(raw)
		must := func(v any) {
			if err := sigsyaml.UnmarshalStrict(js, v); err != nil {
				t.Fatalf("%s: %v", raw["kind"], err)
			}
		}
		switch raw["kind"] {
		case "GatewayClass":
			o := &gw.GatewayClass{}
			must(o)
			in.Classes = append(in.Classes, o)
		case "Gateway":
			o := &gw.Gateway{}
			must(o)
			in.Gateways = append(in.Gateways, o)
		case "HTTPRoute":
			o := &gw.HTTPRoute{}
			must(o)
			in.HTTPRoutes = append(in.HTTPRoutes, o)
		case "GRPCRoute":
			o := &gw.GRPCRoute{}
			must(o)
			in.GRPCRoutes = append(in.GRPCRoutes, o)
		case "TCPRoute":
			o := &gw.TCPRoute{}
			must(o)
			in.TCPRoutes = append(in.TCPRoutes, o)
		case "TLSRoute":
			o := &gw.TLSRoute{}
			must(o)
			in.TLSRoutes = append(in.TLSRoutes, o)
		case "ReferenceGrant":
			o := &gw.ReferenceGrant{}
			must(o)
			in.ReferenceGrants = append(in.ReferenceGrants, o)
		case "Secret":
			o := &corev1.Secret{}
			must(o)
			st := CertificateInvalid
			if _, err := tls.X509KeyPair(o.Data["tls.crt"], o.Data["tls.key"]); err == nil {
				st = CertificateValid
			}
			secrets[[2]string{o.Namespace, o.Name}] = st
		case "BackendTLSPolicy":
			o := &gw.BackendTLSPolicy{}
			must(o)
			in.BackendTLSPolicies = append(in.BackendTLSPolicies, o)
		case "ConfigMap":
			o := &corev1.ConfigMap{}
			must(o)
			cms[[2]string{o.Namespace, o.Name}] = o.Data
		case "Namespace":
			o := &corev1.Namespace{}
			must(o)
			in.Namespaces[o.Name] = o.Labels
		case "Service":
			o := &corev1.Service{}
			must(o)
			s := Service{Selector: o.Spec.Selector, NamedPorts: map[string]int32{}}
			for _, p := range o.Spec.Ports {
				s.Ports = append(s.Ports, p.Port)
				if p.Name != "" {
					s.NamedPorts[p.Name] = p.Port
				}
			}
			svcs[[2]string{o.Namespace, o.Name}] = s
		default:
			if !lenient {
				t.Fatalf("unexpected kind %v", raw["kind"])
			}
		}
	}
	in.Service = func(ns, name string) (Service, bool) { s, ok := svcs[[2]string{ns, name}]; return s, ok }
	if secrets != nil {
		in.Secret = func(ns, name string) CertificateState {
			if st, ok := secrets[[2]string{ns, name}]; ok {
				return st
			}
			return CertificateMissing
		}
	}
	in.ConfigMap = func(ns, name string) (map[string]string, bool) { d, ok := cms[[2]string{ns, name}]; return d, ok }
	return in
}

func render(t *testing.T, out Output) []byte {
	t.Helper()
	var refs []Ref
	for r := range out.Reports {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	type report struct {
		Object string  `json:"object"`
		Report *Report `json:"report"`
	}
	doc := struct {
		Gateways         any      `json:"gateways"`
		VirtualServices  any      `json:"virtualServices"`
		DestinationRules any      `json:"destinationRules,omitempty"`
		Reports          []report `json:"reports"`
	}{out.Gateways, out.VirtualServices, nil, nil}
	if len(out.DestinationRules) > 0 {
		doc.DestinationRules = out.DestinationRules
	}
	for _, r := range refs {
		doc.Reports = append(doc.Reports, report{r.String(), out.Reports[r]})
	}
	b, err := sigsyaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
