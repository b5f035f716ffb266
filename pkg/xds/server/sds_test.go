package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/credentials"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
	"github.com/meshplane/discovery/pkg/xds/streamauth"
)

// fakeCreds is an in-memory credentials.Reader.
type fakeCreds struct {
	mu  sync.Mutex
	m   map[string]credentials.TLS
	fns []func(ns, name string)
}

func (f *fakeCreds) Get(ns, name string) (credentials.TLS, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.m[ns+"/"+name]
	return t, ok
}

func (f *fakeCreds) OnChange(fn func(ns, name string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fns = append(f.fns, fn)
}

// set stores (or with a zero TLS deletes) a Secret and announces it.
func (f *fakeCreds) set(ns, name string, t credentials.TLS) {
	f.mu.Lock()
	if t.Cert == nil && t.CA == nil {
		delete(f.m, ns+"/"+name)
	} else {
		f.m[ns+"/"+name] = t
	}
	fns := append([]func(string, string){}, f.fns...)
	f.mu.Unlock()
	for _, fn := range fns {
		fn(ns, name)
	}
}

// syncBuffer is a log sink tests can read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testAuthn plays the TLS port's authentication: the caller's namespace
// (and, after a slash, service account) is the x-test-caller metadata its
// connection sends (dialAs).
type testAuthn struct{}

func (testAuthn) Authenticate(ctx context.Context) (ca.Identity, string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-test-caller"); len(v) == 1 {
		ns, sa, _ := strings.Cut(v[0], "/")
		return ca.Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: sa}, "test", nil
	}
	return ca.Identity{}, "", errors.New("no x-test-caller")
}

// callerCreds sends x-test-caller on every call.
type callerCreds string

func (c callerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"x-test-caller": string(c)}, nil
}
func (callerCreds) RequireTransportSecurity() bool { return false }

// dialAs connects to addr as a caller authenticated in namespace ns.
func dialAs(t testing.TB, addr, ns string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(callerCreds(ns)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// startCredServer runs a Server serving creds on two loopback ports, as
// serve does: ts.addr authenticates every stream with streamauth's Guard
// (callers connect with dialAs), plainAddr authenticates nobody.
func startCredServer(t *testing.T, creds credentials.Reader) (ts *testServer, logs *syncBuffer, plainAddr string) {
	t.Helper()
	opts := DefaultOptions()
	opts.DebounceAfter = 10 * time.Millisecond
	opts.DebounceMax = time.Second
	opts.Credentials = creds
	logs = &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	reg := prometheus.NewRegistry()
	s, err := New(opts, meshStore(t, 1), log, reg)
	if err != nil {
		t.Fatal(err)
	}
	guard := streamauth.New(testAuthn{}, log, reg)
	secure := serveOn(t, s, grpc.ChainStreamInterceptor(guard.StreamInterceptor()))
	plain := serveOn(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() { _ = s.Start(ctx); close(started) }()
	t.Cleanup(func() {
		cancel()
		<-started
	})
	return &testServer{s: s, addr: secure, reg: reg}, logs, plain
}

// serveOn serves s's xDS on a new loopback port until the test ends.
func serveOn(t *testing.T, s *Server, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	s.Register(gs)
	served := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(served) }()
	t.Cleanup(func() {
		gs.Stop()
		<-served
	})
	return lis.Addr().String()
}

const (
	gatewayA = "router~10.1.0.1~gw-a.ns-a~ns-a.svc.cluster.local"
	gatewayB = "router~10.1.0.2~gw-b.ns-b~ns-b.svc.cluster.local"
	sidecarA = "sidecar~10.1.0.3~app.ns-a~ns-a.svc.cluster.local"
	certA    = "kubernetes://cert-a"
	caA      = "kubernetes://cert-a-cacert"
	keyA     = "PRIVATE-KEY-OF-A"
)

func testCreds() *fakeCreds {
	return &fakeCreds{m: map[string]credentials.TLS{
		"ns-a/cert-a":        {Cert: []byte("CERT-A-v1"), Key: []byte(keyA)},
		"ns-a/cert-a-cacert": {CA: []byte("CA-OF-A")},
		"ns-b/cert-b":        {Cert: []byte("CERT-B"), Key: []byte("PRIVATE-KEY-OF-B")},
	}}
}

// secrets decodes a response's Secrets by name.
func secrets(t *testing.T, rs []*anypb.Any) map[string]*tlsv3.Secret {
	t.Helper()
	out := map[string]*tlsv3.Secret{}
	for _, a := range rs {
		s := &tlsv3.Secret{}
		if err := a.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		out[s.GetName()] = s
	}
	return out
}

func certOf(s *tlsv3.Secret) string {
	return string(s.GetTlsCertificate().GetCertificateChain().GetInlineBytes())
}

func TestGatewayCredentialsSotw(t *testing.T) {
	creds := testCreds()
	ts, logs, plain := startCredServer(t, creds)
	ccA, ccB := dialAs(t, ts.addr, "ns-a"), dialAs(t, ts.addr, "ns-b")

	a := newSotwClient(t, ccA, node(gatewayA, nil))
	a.send(gen.SecretType, []string{certA, caA}, "", "", "")
	r := a.next()
	got := secrets(t, r.GetResources())
	if len(got) != 2 || certOf(got[certA]) != "CERT-A-v1" || string(got[certA].GetTlsCertificate().GetPrivateKey().GetInlineBytes()) != keyA ||
		string(got[caA].GetValidationContext().GetTrustedCa().GetInlineBytes()) != "CA-OF-A" {
		t.Fatalf("gateway A got %v, want its certificate, key and CA", got)
	}
	a.ack(r, []string{certA, caA})

	t.Run("a Secret change pushes the new certificate", func(t *testing.T) {
		creds.set("ns-a", "cert-a", credentials.TLS{Cert: []byte("CERT-A-v2"), Key: []byte(keyA)})
		r2 := a.next()
		if got := secrets(t, r2.GetResources()); certOf(got[certA]) != "CERT-A-v2" || r2.GetVersionInfo() == r.GetVersionInfo() {
			t.Fatalf("after the change: version %q (was %q), secrets %v", r2.GetVersionInfo(), r.GetVersionInfo(), got)
		}
		a.ack(r2, []string{certA, caA})
	})
	t.Run("a change in another namespace sends gateway A nothing", func(t *testing.T) {
		creds.set("ns-b", "cert-b", credentials.TLS{Cert: []byte("CERT-B-v2"), Key: []byte("PRIVATE-KEY-OF-B")})
		creds.set("ns-a", "cert-a", credentials.TLS{Cert: []byte("CERT-A-v3"), Key: []byte(keyA)})
		// The next response is the ns-a change, not anything caused by ns-b.
		r3 := a.next()
		if got := secrets(t, r3.GetResources()); certOf(got[certA]) != "CERT-A-v3" {
			t.Fatalf("next response after changes in ns-b then ns-a: %v", got)
		}
		a.ack(r3, []string{certA, caA})
	})

	denied := map[string]struct {
		cc                   *grpc.ClientConn
		id, resource, reason string
	}{
		"a gateway of namespace B asking for A's secret gets nothing": {ccB, gatewayB, "kubernetes://ns-a/cert-a", denyOtherNamespace},
		"a sidecar of A's namespace gets nothing":                     {ccA, sidecarA, certA, denyNotGateway},
		"a name that is not a credential gets nothing":                {ccA, "router~10.1.0.4~gw-a2.ns-a~ns-a.svc.cluster.local", "default", denyBadName},
		"gateway A's node on the plaintext port gets nothing":         {dial(t, plain), "router~10.1.0.5~gw-a3.ns-a~ns-a.svc.cluster.local", certA, denyUnauthenticated},
	}
	for name, tc := range denied {
		t.Run(name, func(t *testing.T) {
			before := ts.counter(t, "discovery_xds_secrets_denied_total", "reason", tc.reason)
			c := newSotwClient(t, tc.cc, node(tc.id, nil))
			c.send(gen.SecretType, []string{tc.resource}, "", "", "")
			if r := c.next(); len(r.GetResources()) != 0 || r.GetTypeUrl() != gen.SecretType {
				t.Fatalf("got %d resources of %s, want none", len(r.GetResources()), r.GetTypeUrl())
			}
			if n := ts.counter(t, "discovery_xds_secrets_denied_total", "reason", tc.reason); n != before+1 {
				t.Errorf("denied{reason=%s} went from %v to %v, want +1", tc.reason, before, n)
			}
			if !strings.Contains(logs.String(), "resource="+tc.resource) {
				t.Errorf("no log line names the denied resource %s", tc.resource)
			}
		})
	}
	t.Run("a gateway of namespace B asking for a name only A has gets nothing", func(t *testing.T) {
		c := newSotwClient(t, ccB, node(gatewayB, nil))
		c.send(gen.SecretType, []string{certA, "kubernetes://cert-b"}, "", "", "")
		got := secrets(t, c.next().GetResources())
		if len(got) != 1 || certOf(got["kubernetes://cert-b"]) != "CERT-B-v2" {
			t.Fatalf("gateway B got %v, want only its own cert-b", got)
		}
	})
	if l := logs.String(); strings.Contains(l, keyA) || strings.Contains(l, "CERT-A") {
		t.Errorf("secret material in the log:\n%s", l)
	}

	t.Run("config_dump shows the secrets with their private keys redacted", func(t *testing.T) {
		mux := http.NewServeMux()
		ts.s.RegisterDebug(mux)
		web := httptest.NewServer(mux)
		defer web.Close()
		resp, err := http.Get(web.URL + "/debug/config_dump?proxyID=" + gatewayA)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		if _, err := b.ReadFrom(resp.Body); err != nil {
			t.Fatal(err)
		}
		body := b.String()
		for _, want := range []string{"SecretsConfigDump", certA, caA, gen.Redacted, base64.StdEncoding.EncodeToString([]byte("CERT-A-v3"))} {
			if !strings.Contains(body, want) {
				t.Errorf("config_dump lacks %q:\n%.3000s", want, body)
			}
		}
		for _, leak := range []string{keyA, base64.StdEncoding.EncodeToString([]byte(keyA))} {
			if strings.Contains(body, leak) {
				t.Errorf("config_dump shows the private key (%q)", leak)
			}
		}
	})
}

func TestGatewayCredentialsDelta(t *testing.T) {
	creds := testCreds()
	ts, _, plain := startCredServer(t, creds)
	a := newDeltaClientOn(t, dialAs(t, ts.addr, "ns-a"))
	a.send(&discovery.DeltaDiscoveryRequest{Node: node(gatewayA, nil), TypeUrl: gen.SecretType, ResourceNamesSubscribe: []string{certA}})
	r := a.next()
	if got := deltaNames(r); joined(got) != certA {
		t.Fatalf("gateway A got %v, want %s", got, certA)
	}
	a.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.SecretType, ResponseNonce: r.GetNonce()})

	creds.set("ns-a", "cert-a", credentials.TLS{Cert: []byte("CERT-A-v2"), Key: []byte(keyA)})
	r = a.next()
	var s tlsv3.Secret
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetResource().UnmarshalTo(&s) != nil || certOf(&s) != "CERT-A-v2" {
		t.Fatalf("after the change got %v", r.GetResources())
	}
	a.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.SecretType, ResponseNonce: r.GetNonce()})

	creds.set("ns-a", "cert-a", credentials.TLS{})
	r = a.next()
	if len(r.GetResources()) != 0 || joined(r.GetRemovedResources()) != certA {
		t.Fatalf("after the deletion got %v, removed %v; want %s removed", deltaNames(r), r.GetRemovedResources(), certA)
	}

	b := newDeltaClientOn(t, dialAs(t, ts.addr, "ns-b"))
	b.send(&discovery.DeltaDiscoveryRequest{Node: node(gatewayB, nil), TypeUrl: gen.SecretType, ResourceNamesSubscribe: []string{"kubernetes://ns-a/cert-a-cacert"}})
	if r := b.next(); len(r.GetResources()) != 0 {
		t.Fatalf("gateway B got %v of namespace A", deltaNames(r))
	}
	if n := ts.counter(t, "discovery_xds_secrets_denied_total", "reason", denyOtherNamespace); n != 1 {
		t.Errorf("denied{other_namespace} = %v, want 1", n)
	}

	creds.set("ns-a", "cert-a", credentials.TLS{Cert: []byte("CERT-A-v3"), Key: []byte(keyA)})
	p := newDeltaClientOn(t, dial(t, plain))
	p.send(&discovery.DeltaDiscoveryRequest{Node: node(gatewayA, nil), TypeUrl: gen.SecretType, ResourceNamesSubscribe: []string{certA}})
	if r := p.next(); len(r.GetResources()) != 0 {
		t.Fatalf("gateway A's node on the plaintext port got %v", deltaNames(r))
	}
	if n := ts.counter(t, "discovery_xds_secrets_denied_total", "reason", denyUnauthenticated); n != 1 {
		t.Errorf("denied{unauthenticated} = %v, want 1", n)
	}
}

// The generator refers to what the server serves: a gateway that gets a
// Gateway with credentialName over ADS finds the same names in SDS.
func TestCredentialNamesMatchTheListener(t *testing.T) {
	creds := testCreds()
	ts, _, _ := startCredServer(t, creds)
	ev, err := worldtest.Decode([]byte(`
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: ns-a}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["a.example.com"]
    tls: {mode: MUTUAL, credentialName: cert-a}
`))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, ts.s.world.(*model.Store), ev...)
	c := newSotwClient(t, dialAs(t, ts.addr, "ns-a"), node(gatewayA, map[string]any{"LABELS": map[string]any{"istio": "ingressgateway"}}))
	c.send(gen.ListenerType, nil, "", "", "")
	l := c.next()
	var body string
	for _, a := range l.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		js, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		body += string(js)
	}
	var refs []string
	for _, n := range []string{certA, caA} {
		if strings.Contains(body, n) {
			refs = append(refs, n)
		}
	}
	if len(refs) != 2 {
		t.Fatalf("listener refers to %v, want %s and %s", refs, certA, caA)
	}
	c.ack(l, nil)
	c.send(gen.SecretType, refs, "", "", "")
	if got := secrets(t, c.next().GetResources()); len(got) != 2 {
		t.Fatalf("the listener's SDS names resolve to %d secrets, want 2", len(got))
	}
}
