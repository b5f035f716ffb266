package gen

import (
	"os"
	"path/filepath"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func loadCredentialCase(t *testing.T) (*model.World, *model.Proxy) {
	t.Helper()
	dir := filepath.Join("testdata", "gatewaycred")
	store, err := worldtest.LoadFile(filepath.Join(dir, "world.yaml"))
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
	}
	if err := yaml.Unmarshal(data, &node); err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy(node.ID, node.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return store.World(), p
}

func TestGoldenCredentials(t *testing.T) {
	w, p := loadCredentialCase(t)
	o := DefaultOptions(quietLog())
	o.Credentials = true
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(w, p, cc)
	for typeURL, file := range map[string]string{ListenerType: "listeners", RouteType: "routes"} {
		got := render(t, pc, typeURL)
		path := filepath.Join("testdata", "gatewaycred", file+".golden.json")
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
	assertSnapshotConsistent(t, pc)
	if n := g.UnsupportedCounts()["Gateway servers.tls.credentialName"]; n != 0 {
		t.Errorf("credentialName reported unsupported %v times with credentials enabled", n)
	}
}

func TestCredentialNameInFileMode(t *testing.T) {
	w, p := loadCredentialCase(t)
	g := newForTest(quietLog())
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := g.Proxy(w, p, cc)
	if names := pc.Names(ListenerType); len(names) != 0 {
		t.Errorf("file mode built listeners %v for servers whose certificates it cannot read", names)
	}
	if n := g.UnsupportedCounts()["Gateway servers.tls.credentialName"]; n != 1 {
		t.Errorf("credentialName counted %v times in file mode, want 1", n)
	}
	// The webhook only runs with a cluster, where credentialName works.
	gw := w.Config(model.KindGateway, "ingress", "bookinfo")
	if fs := UnsupportedFields(model.KindGateway, &gw.Object.(*networkingv1.Gateway).Spec); len(fs) != 0 {
		t.Errorf("webhook warnings for a Gateway with credentialName: %v", fs)
	}
}

func TestParseCredential(t *testing.T) {
	cases := map[string]struct {
		in   string
		want Credential
		ok   bool
	}{
		"a plain name is the proxy's namespace's Secret": {in: "kubernetes://cert", want: Credential{Name: "cert"}, ok: true},
		"the cacert suffix names the client CA":          {in: "kubernetes://cert-cacert", want: Credential{Name: "cert", CA: true}, ok: true},
		"a namespace may be named":                       {in: "kubernetes://other/cert", want: Credential{Namespace: "other", Name: "cert"}, ok: true},
		"a name that is only the suffix is a name":       {in: "kubernetes://-cacert", want: Credential{Name: "-cacert"}, ok: true},
		"the agent's own names are not credentials":      {in: "default"},
		"another scheme is refused":                      {in: "file:///etc/certs/key.pem"},
		"an empty name is refused":                       {in: "kubernetes://"},
		"an empty namespace is refused":                  {in: "kubernetes:///cert"},
		"a deeper path is refused":                       {in: "kubernetes://a/b/c"},
		"a namespace without a name is refused":          {in: "kubernetes://a/"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := ParseCredential(tc.in)
			if ok != tc.ok || got != tc.want {
				t.Errorf("ParseCredential(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestRedactSecret(t *testing.T) {
	r, err := CertificateSecret("kubernetes://cert", []byte("CERT"), []byte("PRIVATE KEY"))
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsv3.Secret{}
	if err := r.Any.UnmarshalTo(s); err != nil {
		t.Fatal(err)
	}
	red := RedactSecret(s)
	js, err := protojson.Marshal(red)
	if err != nil {
		t.Fatal(err)
	}
	if got := red.GetTlsCertificate().GetPrivateKey().GetInlineString(); got != Redacted {
		t.Errorf("redacted key reads %q", got)
	}
	if string(red.GetTlsCertificate().GetCertificateChain().GetInlineBytes()) != "CERT" {
		t.Errorf("the certificate was changed: %s", js)
	}
	if string(s.GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != "PRIVATE KEY" {
		t.Error("redaction changed the original")
	}
	ca, err := CASecret("kubernetes://cert-cacert", []byte("CA"))
	if err != nil {
		t.Fatal(err)
	}
	var cs tlsv3.Secret
	if err := ca.Any.UnmarshalTo(&cs); err != nil {
		t.Fatal(err)
	}
	if got := RedactSecret(&cs).GetValidationContext().GetTrustedCa(); string(got.GetInlineBytes()) != "CA" {
		t.Errorf("a CA secret was changed by redaction: %v", got)
	}
}
