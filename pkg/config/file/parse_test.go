package file

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshplane/discovery/pkg/model"
)

func TestParseGoodDocuments(t *testing.T) {
	tests := map[string]struct {
		in       string
		wantKey  model.Key
		wantType runtime.Object
		check    func(t *testing.T, obj runtime.Object)
	}{
		"reads a Service and defaults its namespace": {
			in: `
apiVersion: v1
kind: Service
metadata: {name: reviews}
spec:
  ports: [{name: http, port: 9080}]`,
			wantKey:  model.Key{Kind: model.KindService, Namespace: "default", Name: "reviews"},
			wantType: &corev1.Service{},
			check: func(t *testing.T, obj runtime.Object) {
				t.Helper()
				if p := obj.(*corev1.Service).Spec.Ports; len(p) != 1 || p[0].Port != 9080 {
					t.Errorf("ports = %+v", p)
				}
			},
		},
		"reads an EndpointSlice": {
			in: `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: reviews-1, namespace: shop, labels: {kubernetes.io/service-name: reviews}}
addressType: IPv4
endpoints: [{addresses: [127.0.0.2]}]
ports: [{name: http, port: 9080}]`,
			wantKey:  model.Key{Kind: model.KindEndpointSlice, Namespace: "shop", Name: "reviews-1"},
			wantType: &discoveryv1.EndpointSlice{},
			check: func(t *testing.T, obj runtime.Object) {
				t.Helper()
				if e := obj.(*discoveryv1.EndpointSlice).Endpoints; len(e) != 1 || e[0].Addresses[0] != "127.0.0.2" {
					t.Errorf("endpoints = %+v", e)
				}
			},
		},
		"reads a Pod with its status": {
			in: `
apiVersion: v1
kind: Pod
metadata: {name: reviews-v1-0, namespace: shop}
spec: {containers: [{name: app, image: reviews}]}
status: {podIP: 127.0.0.2}`,
			wantKey:  model.Key{Kind: model.KindPod, Namespace: "shop", Name: "reviews-v1-0"},
			wantType: &corev1.Pod{},
			check: func(t *testing.T, obj runtime.Object) {
				t.Helper()
				if ip := obj.(*corev1.Pod).Status.PodIP; ip != "127.0.0.2" {
					t.Errorf("podIP = %q", ip)
				}
			},
		},
		"reads a Namespace and drops a namespace given to it": {
			in: `
apiVersion: v1
kind: Namespace
metadata: {name: shop, namespace: other, labels: {istio-injection: enabled}}`,
			wantKey:  model.Key{Kind: model.KindNamespace, Name: "shop"},
			wantType: &corev1.Namespace{},
			check: func(t *testing.T, obj runtime.Object) {
				t.Helper()
				if ns := obj.(*corev1.Namespace).Namespace; ns != "" {
					t.Errorf("namespace = %q", ns)
				}
			},
		},
		"reads a v1 VirtualService": {
			in: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http: [{route: [{destination: {host: reviews, subset: v1}, weight: 100}]}]`,
			wantKey:  model.Key{Kind: model.KindVirtualService, Namespace: "shop", Name: "reviews"},
			wantType: &networkingv1.VirtualService{},
			check: func(t *testing.T, obj runtime.Object) {
				t.Helper()
				vs := obj.(*networkingv1.VirtualService)
				if got := vs.Spec.GetHttp()[0].GetRoute()[0].GetDestination().GetSubset(); got != "v1" {
					t.Errorf("subset = %q", got)
				}
			},
		},
		"converts a v1alpha3 VirtualService to v1": {
			in: `
apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata: {name: reviews}
spec: {hosts: [reviews.default.svc.cluster.local], http: [{route: [{destination: {host: reviews}}]}]}`,
			wantKey:  model.Key{Kind: model.KindVirtualService, Namespace: "default", Name: "reviews"},
			wantType: &networkingv1.VirtualService{},
			check: func(t *testing.T, obj runtime.Object) {
				t.Helper()
				vs := obj.(*networkingv1.VirtualService)
				if vs.APIVersion != "networking.istio.io/v1" || vs.Spec.GetHosts()[0] != "reviews.default.svc.cluster.local" {
					t.Errorf("got %s %v", vs.APIVersion, vs.Spec.GetHosts())
				}
			},
		},
		"converts a v1beta1 DestinationRule to v1, reading proto field names too": {
			in: `
apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata: {name: reviews}
spec:
  host: reviews
  subsets: [{name: v1, labels: {version: v1}}]
  traffic_policy: {loadBalancer: {simple: ROUND_ROBIN}}`,
			wantKey:  model.Key{Kind: model.KindDestinationRule, Namespace: "default", Name: "reviews"},
			wantType: &networkingv1.DestinationRule{},
			check: func(t *testing.T, obj runtime.Object) {
				t.Helper()
				dr := obj.(*networkingv1.DestinationRule)
				if dr.Spec.GetSubsets()[0].GetLabels()["version"] != "v1" || dr.Spec.GetTrafficPolicy() == nil {
					t.Errorf("spec = %v", &dr.Spec)
				}
			},
		},
		"reads a Gateway": {
			in: `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress}
spec: {selector: {istio: ingressgateway}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]}`,
			wantKey:  model.Key{Kind: model.KindGateway, Namespace: "default", Name: "ingress"},
			wantType: &networkingv1.Gateway{},
		},
		"reads a ServiceEntry": {
			in: `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: external}
spec: {hosts: [example.com], ports: [{number: 443, name: https, protocol: TLS}], resolution: DNS}`,
			wantKey:  model.Key{Kind: model.KindServiceEntry, Namespace: "default", Name: "external"},
			wantType: &networkingv1.ServiceEntry{},
		},
		"reads a Sidecar": {
			in: `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec: {egress: [{hosts: ["./*"]}]}`,
			wantKey:  model.Key{Kind: model.KindSidecar, Namespace: "shop", Name: "default"},
			wantType: &networkingv1.Sidecar{},
		},
		"reads a WorkloadEntry": {
			in: `
apiVersion: networking.istio.io/v1beta1
kind: WorkloadEntry
metadata: {name: vm-1}
spec: {address: 127.0.0.9, labels: {app: vm}}`,
			wantKey:  model.Key{Kind: model.KindWorkloadEntry, Namespace: "default", Name: "vm-1"},
			wantType: &networkingv1.WorkloadEntry{},
		},
		"reads a PeerAuthentication": {
			in: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec: {mtls: {mode: STRICT}}`,
			wantKey:  model.Key{Kind: model.KindPeerAuthentication, Namespace: "istio-system", Name: "default"},
			wantType: &securityv1.PeerAuthentication{},
		},
		"converts a v1beta1 AuthorizationPolicy to v1": {
			in: `
apiVersion: security.istio.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: allow-reviews}
spec: {action: ALLOW, rules: [{from: [{source: {principals: [cluster.local/ns/default/sa/productpage]}}]}]}`,
			wantKey:  model.Key{Kind: model.KindAuthorizationPolicy, Namespace: "default", Name: "allow-reviews"},
			wantType: &securityv1.AuthorizationPolicy{},
			check: func(t *testing.T, obj runtime.Object) {
				t.Helper()
				if ap := obj.(*securityv1.AuthorizationPolicy); ap.APIVersion != "security.istio.io/v1" {
					t.Errorf("apiVersion = %q", ap.APIVersion)
				}
			},
		},
		"reads a RequestAuthentication": {
			in: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt}
spec: {jwtRules: [{issuer: https://issuer.example}]}`,
			wantKey:  model.Key{Kind: model.KindRequestAuthentication, Namespace: "default", Name: "jwt"},
			wantType: &securityv1.RequestAuthentication{},
		},
		"reads JSON": {
			in:       `{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}`,
			wantKey:  model.Key{Kind: model.KindNamespace, Name: "shop"},
			wantType: &corev1.Namespace{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs, errs := Parse("f.yaml", []byte(tc.in))
			if len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			if len(objs) != 1 {
				t.Fatalf("got %d objects, want 1", len(objs))
			}
			o := objs[0]
			if o.Key != tc.wantKey {
				t.Errorf("key = %v, want %v", o.Key, tc.wantKey)
			}
			if reflect.TypeOf(o.Object) != reflect.TypeOf(tc.wantType) {
				t.Errorf("type = %T, want %T", o.Object, tc.wantType)
			}
			if rv := o.Object.(metav1.Object).GetResourceVersion(); rv != o.Hash || rv == "" {
				t.Errorf("resourceVersion = %q, hash %q", rv, o.Hash)
			}
			if tc.check != nil {
				tc.check(t, o.Object)
			}
		})
	}
}

func TestParseStreams(t *testing.T) {
	tests := map[string]struct {
		in        string
		wantKeys  []string
		wantLines []int
		wantDocs  []int
		wantItems []int
	}{
		"skips empty and comment-only documents without counting them": {
			in: "---\n# header\n---\n\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\n" +
				"# b\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n",
			wantKeys:  []string{"Namespace/a", "Namespace/b"},
			wantLines: []int{5, 11},
			wantDocs:  []int{0, 1},
			wantItems: []int{-1, -1},
		},
		"reads the items of a List": {
			in: "apiVersion: v1\nkind: List\nitems:\n" +
				"- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n" +
				"- {apiVersion: v1, kind: Service, metadata: {name: s, namespace: a}}\n",
			wantKeys:  []string{"Namespace/a", "Service/a/s"},
			wantLines: []int{1, 1},
			wantDocs:  []int{0, 0},
			wantItems: []int{0, 1},
		},
		"handles CRLF line ends and separators with comments": {
			in:        "apiVersion: v1\r\nkind: Namespace\r\nmetadata: {name: a}\r\n--- # next\r\napiVersion: v1\r\nkind: Namespace\r\nmetadata: {name: b}\r\n",
			wantKeys:  []string{"Namespace/a", "Namespace/b"},
			wantLines: []int{1, 5},
			wantDocs:  []int{0, 1},
			wantItems: []int{-1, -1},
		},
		"treats a null document as no object": {
			in:        "~\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n",
			wantKeys:  []string{"Namespace/a"},
			wantLines: []int{3},
			wantDocs:  []int{1},
			wantItems: []int{-1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs, errs := Parse("f.yaml", []byte(tc.in))
			if len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			var keys []string
			var lines, docs, items []int
			for _, o := range objs {
				keys = append(keys, o.Key.String())
				lines = append(lines, o.Line)
				docs = append(docs, o.Doc)
				items = append(items, o.Item)
			}
			if !reflect.DeepEqual(keys, tc.wantKeys) || !reflect.DeepEqual(lines, tc.wantLines) ||
				!reflect.DeepEqual(docs, tc.wantDocs) || !reflect.DeepEqual(items, tc.wantItems) {
				t.Errorf("keys %v lines %v docs %v items %v, want %v %v %v %v",
					keys, lines, docs, items, tc.wantKeys, tc.wantLines, tc.wantDocs, tc.wantItems)
			}
		})
	}
}

// good is a valid document placed before each bad one, to show that the
// rest of a file still decodes.
const good = "apiVersion: v1\nkind: Namespace\nmetadata: {name: ok}\n---\n"

func TestParseBadDocuments(t *testing.T) {
	tests := map[string]struct {
		bad  string // starts at line 5, as document 1
		want string
		line int // where the document starts, if not 5
	}{
		"reports bad YAML with the line in the file": {
			bad:  "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n bad: [\n",
			want: "f.yaml:5: document 1: yaml: line 8: did not find expected key",
		},
		"reports a tab in the indentation": {
			bad:  "apiVersion: v1\nkind: Service\nmetadata:\n\tname: a\n",
			want: "f.yaml:5: document 1: yaml: line 8: found character that cannot start any token",
		},
		"reports a duplicate key": {
			bad:  "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n",
			want: "f.yaml:5: document 1: yaml: unmarshal errors:\n  line 9: key \"name\" already set in map",
		},
		"reports a document that is not an object": {
			bad:  "- apiVersion: v1\n",
			want: "f.yaml:5: document 1: a document must be an object with apiVersion and kind",
		},
		"reports a missing apiVersion": {
			bad:  "kind: Service\nmetadata: {name: a}\n",
			want: "f.yaml:5: document 1: apiVersion is missing",
		},
		"reports a missing kind": {
			bad:  "apiVersion: v1\nmetadata: {name: a}\n",
			want: "f.yaml:5: document 1: kind is missing",
		},
		"reports an apiVersion that is not a string": {
			bad:  "apiVersion: 1\nkind: Service\n",
			want: "f.yaml:5: document 1: apiVersion and kind: json: cannot unmarshal number into Go struct field TypeMeta.apiVersion of type string",
		},
		"reports an unknown kind": {
			bad:  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n",
			want: "f.yaml:5: document 1: Deployment.apps is not a kind discovery reads",
		},
		"reports a version that is not served": {
			bad:  "apiVersion: networking.istio.io/v2\nkind: VirtualService\nmetadata: {name: a}\n",
			want: `f.yaml:5: document 1: VirtualService.networking.istio.io: version "v2" is not served (use v1)`,
		},
		"reports a Kubernetes field of the wrong type": {
			bad:  "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec:\n  ports: [{port: eighty}]\n",
			want: "f.yaml:5: document 1: Service: json: cannot unmarshal string into Go struct field ServicePort.spec.ports.port of type int32",
		},
		"reports an unknown Kubernetes field": {
			bad:  "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {portz: []}\n",
			want: `f.yaml:5: document 1: Service: unknown field "spec.portz"`,
		},
		"reports an Istio field of the wrong type": {
			bad:  "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a}\nspec: {hosts: 5}\n",
			want: "f.yaml:5: document 1: VirtualService: spec: json: cannot unmarshal number into a list",
		},
		"reports an unknown Istio field": {
			bad:  "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a}\nspec: {host: a, subset: [{name: v1}]}\n",
			want: `f.yaml:5: document 1: DestinationRule: spec: unknown field "subset"`,
		},
		"reports a missing name": {
			bad:  "apiVersion: v1\nkind: Pod\nmetadata: {namespace: a}\n",
			want: "f.yaml:5: document 1: Pod: metadata.name is missing",
		},
		"reports an invalid name": {
			bad:  "apiVersion: v1\nkind: Service\nmetadata: {name: Reviews}\n",
			want: `f.yaml:5: document 1: Service: metadata.name "Reviews": a DNS-1035 label must consist of lower case alphanumeric characters or '-'`,
		},
		"reports an invalid namespace": {
			bad:  "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: a/b}\n",
			want: `f.yaml:5: document 1: Service: metadata.namespace "a/b": a lowercase RFC 1123 label must consist of`,
		},
		"reports content on a separator line": {
			bad:  "--- {apiVersion: v1}\n",
			line: 4,
			want: `f.yaml:4: document 1: content after the document separator "---" is not supported; start it on the next line`,
		},
		"reports a bad List item with its index": {
			bad:  "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: x}}\n- 7\n",
			want: "f.yaml:5: document 1, item 1: a List item must be an object with apiVersion and kind",
		},
		"reports a List inside a List": {
			bad:  "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: List, items: []}\n",
			want: "f.yaml:5: document 1, item 0: a List inside a List is not supported",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := good + tc.bad
			if strings.HasPrefix(tc.bad, "---") {
				in = strings.TrimSuffix(good, "---\n") + tc.bad
			}
			objs, errs := Parse("f.yaml", []byte(in))
			if len(objs) == 0 || objs[0].Key.String() != "Namespace/ok" {
				t.Errorf("the good document was not read: %v", objs)
			}
			if len(errs) != 1 {
				t.Fatalf("got %d errors, want 1: %v", len(errs), errs)
			}
			if got := errs[0].Error(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("error\n got: %s\nwant: %s...", got, tc.want)
			}
			wantLine := 5
			if tc.line != 0 {
				wantLine = tc.line
			}
			var de *DocError
			if !errors.As(errs[0], &de) || de.File != "f.yaml" || de.Doc != 1 || de.Line != wantLine {
				t.Errorf("error fields = %+v", errs[0])
			}
		})
	}
}
