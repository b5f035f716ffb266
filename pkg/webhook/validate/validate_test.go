package validate

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

func gkOf(t testing.TB, doc string) (schema.GroupKind, []byte) {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var head struct{ APIVersion, Kind string }
	if err := yaml.Unmarshal(js, &head); err != nil {
		t.Fatal(err)
	}
	gv, err := schema.ParseGroupVersion(head.APIVersion)
	if err != nil {
		t.Fatal(err)
	}
	return schema.GroupKind{Group: gv.Group, Kind: head.Kind}, js
}

const vsHead = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r}\n"

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		doc     string
		problem string // "" means valid
		warning string
	}{
		"accepts a VirtualService splitting 80/20": {
			doc: vsHead + `spec:
  hosts: [reviews]
  http:
  - match: [{uri: {regex: "^/api/v[0-9]+"}}]
    route:
    - {destination: {host: reviews, subset: v1}, weight: 80}
    - {destination: {host: reviews, subset: v2, port: {number: 9080}}, weight: 20}`,
		},
		"accepts a delegate VirtualService (no hosts)": {
			doc: vsHead + "spec:\n  exportTo: [bookinfo]\n  http: [{match: [{uri: {prefix: /reviews/v2}}], route: [{destination: {host: reviews}}]}]",
		},
		"rejects a delegate VirtualService with tcp routes": {
			doc:     vsHead + "spec:\n  tcp: [{route: [{destination: {host: reviews}}]}]",
			problem: "spec.tcp: a delegate VirtualService (no hosts) must have no tcp routes",
		},
		"rejects a delegate VirtualService with gateways": {
			doc:     vsHead + "spec:\n  gateways: [edge]\n  http: [{route: [{destination: {host: reviews}}]}]",
			problem: "spec.gateways: a delegate VirtualService (no hosts) must have no gateways",
		},
		"rejects a delegate VirtualService that delegates again": {
			doc:     vsHead + "spec:\n  http: [{delegate: {name: other}}]",
			problem: "spec.http[0].delegate: a delegate VirtualService (no hosts) cannot delegate again",
		},
		"accepts a root VirtualService delegating a route": {
			doc: vsHead + "spec:\n  hosts: [reviews]\n  http: [{match: [{uri: {prefix: /reviews}}], delegate: {name: reviews-routes, namespace: team}}]",
		},
		"accepts weights that add up to 90: they are relative, and Istio accepts them": {
			doc: vsHead + `spec:
  hosts: [reviews]
  http:
  - route:
    - {destination: {host: reviews, subset: v1}, weight: 70}
    - {destination: {host: reviews, subset: v2}, weight: 20}`,
		},
		"rejects a header match name with CR/LF, which Envoy refuses": {
			doc:     vsHead + "spec:\n  hosts: [a]\n  http: [{match: [{headers: {\"x-a\\r\\nb\": {exact: \"1\"}}}], route: [{destination: {host: a}}]}]",
			problem: `spec.http[0].match[0].headers."x-a\r\nb": "x-a\r\nb" is not a header name`,
		},
		"rejects a header value it sets with CR/LF, which would inject a header": {
			doc:     vsHead + "spec:\n  hosts: [a]\n  http: [{headers: {request: {set: {x-b: \"v\\r\\nInjected: 1\"}}}, route: [{destination: {host: a}}]}]",
			problem: `spec.http[0].headers.request.set.x-b: control character '\r'`,
		},
		"rejects a header name it sets with CR/LF in a destination's headers": {
			doc:     vsHead + "spec:\n  hosts: [a]\n  http: [{route: [{destination: {host: a}, headers: {response: {add: {\"x\\nb\": v}}}}]}]",
			problem: `spec.http[0].route[0].headers.response.add."x\nb": a header name must not contain NUL, CR or LF`,
		},
		"rejects an empty header prefix, which Envoy refuses": {
			doc:     vsHead + "spec:\n  hosts: [a]\n  http: [{match: [{headers: {x-a: {prefix: \"\"}}}], route: [{destination: {host: a}}]}]",
			problem: "spec.http[0].match[0].headers.x-a.prefix: Envoy refuses an empty prefix",
		},
		"rejects a regex longer than Envoy's program size allows": {
			doc:     vsHead + "spec:\n  hosts: [a]\n  http: [{match: [{uri: {regex: \"" + strings.Repeat("a", 1025) + "\"}}], route: [{destination: {host: a}}]}]",
			problem: "spec.http[0].match[0].uri.regex: a regex is at most 1024 bytes",
		},
		"rejects an unterminated %VARIABLE% in a header value": {
			doc:     vsHead + "spec:\n  hosts: [a]\n  http: [{headers: {request: {add: {x-b: \"50%\"}}}, route: [{destination: {host: a}}]}]",
			problem: "spec.http[0].headers.request.add.x-b: unterminated or empty %VARIABLE%",
		},
		"accepts %% and %VARIABLE% in header values, and withoutHeaders regex * (absent)": {
			doc: vsHead + "spec:\n  hosts: [a]\n  http: [{match: [{withoutHeaders: {x-a: {regex: \"*\"}}}], headers: {request: {set: {x-b: \"100%% %HOSTNAME% %REQ(x-y)%\"}}}, route: [{destination: {host: a}}]}]",
		},
		"rejects an invalid regex": {
			doc:     vsHead + "spec:\n  hosts: [reviews]\n  http: [{match: [{uri: {regex: 'a(b'}}], route: [{destination: {host: reviews}}]}]",
			problem: "spec.http[0].match[0].uri.regex: not an RE2 regex",
		},
		"rejects an invalid header regex": {
			doc:     vsHead + "spec:\n  hosts: [reviews]\n  http: [{match: [{headers: {x-user: {regex: '*'}}}], route: [{destination: {host: reviews}}]}]",
			problem: "headers.x-user.regex",
		},
		"rejects a route with both route and redirect": {
			doc:     vsHead + "spec:\n  hosts: [reviews]\n  http: [{redirect: {uri: /x}, route: [{destination: {host: reviews}}]}]",
			problem: "HTTP route with a redirect cannot contain route",
		},
		"rejects a destination port out of range": {
			doc:     vsHead + "spec:\n  hosts: [reviews]\n  tcp: [{match: [{sourceLabels: {app: a}}], route: [{destination: {host: reviews, port: {number: 70000}}}]}]",
			problem: "port number 70000 must be in the range 1..65535",
		},
		"rejects an unknown field": {
			doc:     vsHead + "spec:\n  hosts: [reviews]\n  htp: []",
			problem: `unknown field "htp"`,
		},
		"warns about a field the generator ignores": {
			doc:     vsHead + "spec:\n  hosts: [reviews]\n  http: [{match: [{sourceLabels: {app: a}, statPrefix: s}], route: [{destination: {host: reviews}}]}]",
			warning: "spec.http[].match[].statPrefix: this field is not supported by discovery yet",
		},
		"rejects a DestinationRule subset without a name": {
			doc:     "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\nspec:\n  host: reviews\n  subsets: [{labels: {version: v1}}]",
			problem: "spec.subsets[0].name: subset name cannot be empty",
		},
		"rejects a DestinationRule with a duplicate subset": {
			doc:     "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\nspec:\n  host: reviews\n  subsets: [{name: v1}, {name: v1}]",
			problem: "duplicate subset names: v1",
		},
		"rejects a Gateway HTTPS server without tls": {
			doc:     "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['*']}]",
			problem: "server must have TLS settings for HTTPS/TLS protocols",
		},
		"accepts a Gateway with a credential": {
			doc: "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: ['ns/*.example.com'], tls: {mode: SIMPLE, credentialName: cert}}]",
		},
		"accepts a ServiceEntry with STATIC resolution and no endpoints yet, as Istio does": {
			doc: "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s}\nspec:\n  hosts: [db.example]\n  addresses: [10.0.0.9]\n  ports: [{number: 5432, name: pg, protocol: TCP}]\n  resolution: STATIC",
		},
		"rejects a Sidecar egress host without a namespace": {
			doc:     "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s}\nspec:\n  egress: [{hosts: [reviews]}]",
			problem: "must be of form namespace/dnsName",
		},
		"rejects an AuthorizationPolicy with an unknown action": {
			doc:     "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a}\nspec:\n  action: MAYBE",
			problem: "MAYBE",
		},
		"rejects an AuthorizationPolicy condition with an unknown key": {
			doc:     "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a}\nspec:\n  rules: [{when: [{key: request.colour, values: [red]}]}]",
			problem: `unknown condition key "request.colour"`,
		},
		"accepts an AuthorizationPolicy with known keys": {
			doc: "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a}\nspec:\n  action: DENY\n  rules: [{from: [{source: {namespaces: [foo]}}], to: [{operation: {ports: ['8080'], methods: [GET]}}], when: [{key: 'request.headers[x-id]', values: ['1']}]}]",
		},
		"rejects CUSTOM without a provider": {
			doc:     "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a}\nspec:\n  action: CUSTOM",
			problem: "CUSTOM action without rules is never triggered",
		},
		"rejects port-level mTLS without a selector": {
			doc:     "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p}\nspec:\n  portLevelMtls: {8080: {mode: DISABLE}}",
			problem: "cannot have port level mTLS",
		},
		"rejects a JWT rule with neither issuer nor jwksUri": {
			doc:     "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: r}\nspec:\n  jwtRules: [{audiences: [a]}]",
			problem: "issuer or jwksUri must be non-empty",
		},
		"lets an invalid object that is being deleted lose its finalizers": {
			doc: "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, deletionTimestamp: '2026-01-01T00:00:00Z', finalizers: [x]}\nspec: {}",
		},
		"accepts a kind discovery reads but does not act on, with a warning": {
			doc:     "apiVersion: extensions.istio.io/v1alpha1\nkind: TrafficExtension\nmetadata: {name: e}\nspec: {wasm: {url: 'oci://ghcr.io/example/plugin:1'}}",
			warning: "TrafficExtension: this kind is not supported by discovery yet: its extensions are not applied to any proxy",
		},
		"warns of EnvoyFilter patches discovery does not apply": {
			doc: "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: e}\nspec:\n  configPatches:\n" +
				"  - applyTo: BOOTSTRAP\n    patch: {operation: MERGE, value: {stats_flush_interval: 5s}}",
			warning: "configPatches[].applyTo",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gk, raw := gkOf(t, tc.doc)
			warnings, err := Validate(gk, raw)
			if tc.problem == "" && err != nil {
				t.Fatalf("valid object refused: %v", err)
			}
			if tc.problem != "" {
				var ie *InvalidError
				var de *DecodeError
				if err == nil || !(errors.As(err, &ie) || errors.As(err, &de)) || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("err = %v, want one containing %q", err, tc.problem)
				}
			}
			if tc.warning != "" && !strings.Contains(strings.Join(warnings, "\n"), tc.warning) {
				t.Fatalf("warnings = %q, want one containing %q", warnings, tc.warning)
			}
			if tc.warning == "" && len(warnings) > 0 {
				t.Fatalf("unexpected warnings %q", warnings)
			}
		})
	}
}
