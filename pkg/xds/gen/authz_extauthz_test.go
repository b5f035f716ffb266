package gen

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

const extAuthzServices = `apiVersion: v1
kind: Service
metadata: {name: ext-authz, namespace: foo}
spec:
  clusterIP: 10.96.9.2
  ports: [{name: http, port: 8000}, {name: grpc, port: 9000}]
---
apiVersion: v1
kind: Service
metadata: {name: twice, namespace: a}
spec:
  clusterIP: 10.96.9.3
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: twice, namespace: b}
spec:
  clusterIP: 10.96.9.4
  ports: [{name: http, port: 80}]
`

func extAuthzLookup(t *testing.T, providers ...*meshv1alpha1.MeshConfig_ExtensionProvider) meshLookup {
	t.Helper()
	w := loadWorld(t, extAuthzServices).World()
	return meshLookup{w: newView(w, nil), mesh: &meshv1alpha1.MeshConfig{ExtensionProviders: providers}}
}

func httpProvider(name string, c *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) *meshv1alpha1.MeshConfig_ExtensionProvider {
	return &meshv1alpha1.MeshConfig_ExtensionProvider{Name: name, Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExtAuthzHttp{EnvoyExtAuthzHttp: c}}
}

func grpcProvider(name string, c *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider) *meshv1alpha1.MeshConfig_ExtensionProvider {
	return &meshv1alpha1.MeshConfig_ExtensionProvider{Name: name, Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExtAuthzGrpc{EnvoyExtAuthzGrpc: c}}
}

// An HTTP provider resolves to the outbound cluster of its service and
// port, with istiod's defaults (600s timeout) and header matchers.
func TestExtAuthzHTTPProvider(t *testing.T) {
	look := extAuthzLookup(t, httpProvider("http-authz", &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{
		Service: "foo/ext-authz.foo.svc.cluster.local", Port: 8000, PathPrefix: "/check", FailOpen: true, StatusOnError: "503",
		IncludeRequestHeadersInCheck:    []string{"x-ext-authz", "x-pre-*", "*-suf"},
		HeadersToUpstreamOnAllow:        []string{"x-user"},
		IncludeAdditionalHeadersInCheck: map[string]string{"x-b": "2", "x-a": "1"},
		IncludeRequestBodyInCheck:       &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationRequestBody{MaxRequestBytes: 4096, PackAsBytes: true},
	}))
	p, err := extAuthzFor(extAuthzProviders(look), "http-authz")
	if err != nil {
		t.Fatal(err)
	}
	if p.tcp != nil {
		t.Error("an HTTP provider has no TCP ext_authz (istiod builds none)")
	}
	svc := p.http.GetHttpService()
	if got := svc.GetServerUri().GetCluster(); got != "outbound|8000||ext-authz.foo.svc.cluster.local" {
		t.Errorf("cluster %q", got)
	}
	if svc.GetServerUri().GetTimeout().GetSeconds() != 600 || svc.GetPathPrefix() != "/check" {
		t.Errorf("server uri %v path prefix %q", svc.GetServerUri(), svc.GetPathPrefix())
	}
	if !p.http.GetFailureModeAllow() || p.http.GetStatusOnError().GetCode() != 503 {
		t.Errorf("failOpen/statusOnError: %v %v", p.http.GetFailureModeAllow(), p.http.GetStatusOnError())
	}
	pats := p.http.GetAllowedHeaders().GetPatterns()
	if len(pats) != 3 || pats[0].GetExact() != "x-ext-authz" || pats[1].GetPrefix() != "x-pre-" || pats[2].GetSuffix() != "-suf" || !pats[0].GetIgnoreCase() {
		t.Errorf("allowed headers %v", pats)
	}
	add := svc.GetAuthorizationRequest().GetHeadersToAdd()
	if len(add) != 2 || add[0].GetKey() != "x-a" || add[1].GetKey() != "x-b" {
		t.Errorf("headers to add, sorted: %v", add)
	}
	if up := svc.GetAuthorizationResponse().GetAllowedUpstreamHeaders().GetPatterns(); len(up) != 1 || up[0].GetExact() != "x-user" {
		t.Errorf("upstream headers %v", up)
	}
	if b := p.http.GetWithRequestBody(); b.GetMaxRequestBytes() != 4096 || !b.GetPackAsBytes() {
		t.Errorf("body %v", b)
	}
	m := p.http.GetFilterEnabledMetadata()
	if m.GetFilter() != "envoy.filters.http.rbac" || m.GetPath()[0].GetKey() != "istio_ext_authz_shadow_effective_policy_id" ||
		m.GetValue().GetStringMatch().GetPrefix() != "istio-ext-authz-http-authz" {
		t.Errorf("filter enabled metadata %v", m)
	}
}

// A gRPC provider gets an HTTP and a network ext_authz on one gRPC
// service; a bare hostname resolves when one namespace has it.
func TestExtAuthzGRPCProvider(t *testing.T) {
	look := extAuthzLookup(t, grpcProvider("grpc-authz", &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider{
		Service: "ext-authz.foo.svc.cluster.local", Port: 9000, Timeout: durationpb.New(2e9),
	}))
	p, err := extAuthzFor(extAuthzProviders(look), "grpc-authz")
	if err != nil {
		t.Fatal(err)
	}
	g := p.http.GetGrpcService()
	if g.GetEnvoyGrpc().GetClusterName() != "outbound|9000||ext-authz.foo.svc.cluster.local" || g.GetEnvoyGrpc().GetAuthority() != "ext-authz.foo.svc.cluster.local" || g.GetTimeout().GetSeconds() != 2 {
		t.Errorf("grpc service %v", g)
	}
	if p.tcp == nil || p.tcp.GetGrpcService() != g || p.tcp.GetStatPrefix() != "tcp." || p.tcp.GetFilterEnabledMetadata().GetFilter() != "envoy.filters.network.rbac" {
		t.Errorf("tcp ext_authz %v", p.tcp)
	}
}

// A NAMESPACE/HOST service resolves only in that namespace.
func TestExtAuthzNamespacedService(t *testing.T) {
	look := extAuthzLookup(t, httpProvider("a", &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{Service: "a/twice.a.svc.cluster.local", Port: 80}))
	p, err := extAuthzFor(extAuthzProviders(look), "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.http.GetHttpService().GetServerUri().GetCluster(); got != "outbound|80||twice.a.svc.cluster.local" {
		t.Errorf("cluster %q", got)
	}
}

// Every provider error istiod reports makes the provider unusable: a
// CUSTOM policy naming it must then fail closed.
func TestExtAuthzProviderErrors(t *testing.T) {
	good := &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{Service: "foo/ext-authz.foo.svc.cluster.local", Port: 8000}
	for _, tc := range []struct {
		name      string
		providers []*meshv1alpha1.MeshConfig_ExtensionProvider
		use, want string
	}{
		{"missing", []*meshv1alpha1.MeshConfig_ExtensionProvider{httpProvider("a", good)}, "b", `available providers are [a] but found "b"`},
		{"none named", nil, "", "no provider specified"},
		{"bad port", []*meshv1alpha1.MeshConfig_ExtensionProvider{grpcProvider("a", &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider{Service: "ext-authz.foo.svc.cluster.local"})}, "a", "port must be in the range"},
		{"unknown service", []*meshv1alpha1.MeshConfig_ExtensionProvider{httpProvider("a", &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{Service: "nope.foo.svc.cluster.local", Port: 80})}, "a", "could not find service"},
		{"wrong namespace", []*meshv1alpha1.MeshConfig_ExtensionProvider{httpProvider("a", &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{Service: "b/twice.a.svc.cluster.local", Port: 80})}, "a", "could not find service"},
		{"status", []*meshv1alpha1.MeshConfig_ExtensionProvider{httpProvider("a", &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{Service: good.Service, Port: 8000, StatusOnError: "999"})}, "a", "unsupported statusOnError 999"},
		{"path prefix", []*meshv1alpha1.MeshConfig_ExtensionProvider{httpProvider("a", &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{Service: good.Service, Port: 8000, PathPrefix: "check"})}, "a", "pathPrefix must begin with `/`"},
		{"wildcard", []*meshv1alpha1.MeshConfig_ExtensionProvider{httpProvider("a", &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider{Service: good.Service, Port: 8000, HeadersToUpstreamOnAllow: []string{"*"}})}, "a", "single wildcard"},
		{"duplicate", []*meshv1alpha1.MeshConfig_ExtensionProvider{httpProvider("a", good), httpProvider("a", good)}, "a", "must be unique"},
		{"uppercase", []*meshv1alpha1.MeshConfig_ExtensionProvider{httpProvider("Authz", good)}, "Authz", "uppercase letters not allowed"},
		{"hyphen", []*meshv1alpha1.MeshConfig_ExtensionProvider{httpProvider("authz-", good)}, "authz-", "cannot start or end with hyphen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := extAuthzFor(extAuthzProviders(extAuthzLookup(t, tc.providers...)), tc.use)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
