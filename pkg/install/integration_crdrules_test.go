package install

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
)

// TestInstalledCRDsGiveIstiosVerdicts installs the CRDs of the base chart
// on a real API server and checks that it refuses what Istio's CRDs refuse
// through their CEL rules (x-kubernetes-validations) and oneOf schemas,
// naming the field and the rule's message, and accepts what they accept,
// Go-style durations included.
func TestInstalledCRDsGiveIstiosVerdicts(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	installChartCRDs(ctx, t, env, dyn)

	tests := map[string]struct {
		resource, doc string
		strict        bool     // create with fieldValidation=Strict, as kubectl does
		wantErr       []string // all in the refusal; none: accepted
	}{
		"accepts Go-style durations (baseEjectionTime: 3m)": {resource: "destinationrules", doc: `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: go-durations}
spec:
  host: reviews
  trafficPolicy:
    connectionPool: {tcp: {connectTimeout: 500ms}, http: {idleTimeout: 1h}}
    outlierDetection: {consecutive5xxErrors: 5, interval: 1m30s, baseEjectionTime: 3m}`},
		"refuses a connectTimeout under 1ms": {resource: "destinationrules", wantErr: []string{
			"spec.trafficPolicy.connectionPool.tcp.connectTimeout", "must be a valid duration greater than 1ms",
		}, doc: `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: tiny-timeout}
spec:
  host: reviews
  trafficPolicy: {connectionPool: {tcp: {connectTimeout: 500us}}}`},
		"refuses a VirtualService route timeout of 0s": {resource: "virtualservices", wantErr: []string{
			"spec.http[0].timeout", "must be a valid duration greater than 1ms",
		}, doc: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: zero-timeout}
spec:
  hosts: [reviews]
  http: [{route: [{destination: {host: reviews}}], timeout: 0s}]`},
		"refuses a VirtualService uri match that is both exact and prefix": {resource: "virtualservices", wantErr: []string{
			"spec.http[0].match[0].uri", "oneOf",
		}, doc: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: two-matches}
spec:
  hosts: [reviews]
  http: [{match: [{uri: {exact: /a, prefix: /b}}], route: [{destination: {host: reviews}}]}]`},
		"accepts a VirtualService without spec, as Istio's CRD does": {resource: "virtualservices", doc: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: no-spec}`},
		"refuses a ServiceEntry without spec": {resource: "serviceentries", wantErr: []string{"spec: Required value"}, doc: `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: no-spec}`},
		"refuses a ServiceEntry with endpoints and resolution NONE": {resource: "serviceentries", wantErr: []string{"NONE mode cannot set endpoints"}, doc: `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: none-endpoints}
spec:
  hosts: [api.example.com]
  ports: [{number: 443, name: https, protocol: TLS}]
  endpoints: [{address: 10.0.0.1}]`},
		"refuses a ServiceEntry whose host is a lone wildcard": {resource: "serviceentries", wantErr: []string{"spec.hosts[0]", "hostname cannot be wildcard"}, doc: `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wildcard}
spec:
  hosts: ["*"]
  ports: [{number: 443, name: https, protocol: TLS}]
  resolution: DNS`},
		"refuses a Gateway server with both credentialName and credentialNames": {resource: "gateways", wantErr: []string{
			"spec.servers[0].tls", "only one of credentialName or credentialNames can be set",
		}, doc: `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: two-credentials}
spec:
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [example.com]
    tls: {mode: SIMPLE, credentialName: a, credentialNames: [b]}`},
		"refuses a PeerAuthentication with portLevelMtls and no selector": {resource: "peerauthentications", wantErr: []string{"portLevelMtls requires selector"}, doc: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: port-no-selector}
spec: {portLevelMtls: {"8080": {mode: DISABLE}}}`},
		"accepts a PeerAuthentication with portLevelMtls and a selector": {resource: "peerauthentications", doc: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: port-selector}
spec: {selector: {matchLabels: {app: reviews}}, portLevelMtls: {"8080": {mode: DISABLE}}}`},
		"refuses an AuthorizationPolicy with both selector and targetRefs": {resource: "authorizationpolicies", wantErr: []string{"only one of targetRefs or selector can be set"}, doc: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: selector-and-target}
spec:
  selector: {matchLabels: {app: reviews}}
  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: waypoint}]`},
		"refuses a WorkloadEntry with neither address nor network": {resource: "workloadentries", wantErr: []string{"Address is required"}, doc: `
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: nowhere}
spec: {labels: {app: vm}}`},
		"refuses a RequestAuthentication jwksUri that is not http or https": {resource: "requestauthentications", wantErr: []string{
			"spec.jwtRules[0].jwksUri", "url must have scheme http:// or https://",
		}, doc: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: ftp-jwks}
spec: {jwtRules: [{issuer: https://issuer.example.com, jwksUri: "ftp://issuer.example.com/jwks"}]}`},
		"accepts the spelling jwks_uri under strict field validation, as Istio's CRD does": {resource: "requestauthentications", strict: true, doc: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: snake-case}
spec: {jwtRules: [{issuer: https://issuer.example.com, jwks_uri: "https://issuer.example.com/jwks"}]}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.doc), &obj); err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: obj}
			gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
			if err != nil {
				t.Fatal(err)
			}
			opts := metav1.CreateOptions{}
			if tc.strict {
				opts.FieldValidation = metav1.FieldValidationStrict
			}
			_, err = dyn.Resource(gv.WithResource(tc.resource)).Namespace("default").Create(ctx, u, opts)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want a refusal mentioning %q", tc.wantErr)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("err = %v, want Invalid", err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not mention %q", err, want)
				}
			}
		})
	}
}

// installChartCRDs creates the CRDs that the base chart renders (profile
// default) and waits until each is Established.
func installChartCRDs(ctx context.Context, t *testing.T, env *testenv.Env, dyn dynamic.Interface) {
	t.Helper()
	m, err := Render(renderOpts(), Input{Profile: "default"})
	if err != nil {
		t.Fatal(err)
	}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var names []string
	for _, o := range m.Objects() {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if _, err := dyn.Resource(crdGVR).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create CRD %s: %v", o.GetName(), err)
		}
		names = append(names, o.GetName())
	}
	if len(names) == 0 {
		t.Fatal("the chart rendered no CRDs")
	}
	ext, err := apiextclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := kubetest.WaitEstablished(ctx, ext, n, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}
