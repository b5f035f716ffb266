package validate

import (
	"strings"
	"testing"
)

// Objects whose verdict under istiod is known (Istio's webhook and the
// schema of its CRDs): discovery must give the same one (issue 14).
func TestSameVerdictAsIstio(t *testing.T) {
	const (
		dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\n"
		se = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s}\n"
		sc = "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s}\n"
		gw = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g}\n"
		we = "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: w}\n"
		ap = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a}\n"
		pa = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p}\n"
	)
	cases := map[string]struct {
		doc     string
		verdict verdict
		say     string // part of the refusal or warning
	}{
		"accepts Go-style durations in a DestinationRule (3m, 500ms, 1m30s)": {
			doc:     dr + "spec: {host: r, trafficPolicy: {outlierDetection: {baseEjectionTime: 3m, interval: 500ms}, connectionPool: {tcp: {connectTimeout: 1m30s}}}}",
			verdict: accept,
		},
		"accepts Go-style durations in a VirtualService (1m, 1h)": {
			doc:     vsHead + "spec: {hosts: [a], http: [{timeout: 1m, retries: {attempts: 3, perTryTimeout: 1h}, route: [{destination: {host: a}}]}]}",
			verdict: accept,
		},
		"refuses a duration below 1ms, as Istio's CRD does": {
			doc: dr + "spec: {host: r, trafficPolicy: {outlierDetection: {interval: 100us}}}", verdict: refuse, say: "1ms",
		},
		"accepts ServiceEntry ports without a protocol": {
			doc:     se + "spec: {hosts: [a.example.com], addresses: [10.0.0.1], ports: [{number: 80, name: http}], resolution: DNS}",
			verdict: accept,
		},
		"accepts Sidecar ingress ports without a protocol": {
			doc:     sc + "spec: {ingress: [{port: {number: 9080, name: http}, defaultEndpoint: '127.0.0.1:8080'}]}",
			verdict: accept,
		},
		"accepts the condition key source.trustDomain": {
			doc:     ap + "spec: {rules: [{when: [{key: source.trustDomain, values: [cluster.local]}]}]}",
			verdict: accept,
		},
		"warns about a ServiceEntry partial wildcard host": {
			doc:     se + "spec: {hosts: ['*x'], addresses: [10.0.0.1], ports: [{number: 80, name: http, protocol: HTTP}]}",
			verdict: warn, say: `partial wildcard "*x"`,
		},
		"refuses a ServiceEntry host that is only *": {
			doc: se + "spec: {hosts: ['*'], ports: [{number: 80, name: http, protocol: HTTP}]}", verdict: refuse, say: "wildcard",
		},
		"refuses resolution NONE with endpoints": {
			doc:     se + "spec: {hosts: [a.example.com], addresses: [10.0.0.1], ports: [{number: 80, name: http, protocol: HTTP}], resolution: NONE, endpoints: [{address: 1.1.1.1}]}",
			verdict: refuse, say: "NONE",
		},
		"refuses DNS_ROUND_ROBIN with several endpoints": {
			doc:     se + "spec: {hosts: [a.example.com], ports: [{number: 80, name: http, protocol: HTTP}], resolution: DNS_ROUND_ROBIN, endpoints: [{address: a.example.com}, {address: b.example.com}]}",
			verdict: refuse, say: "DNS_ROUND_ROBIN",
		},
		"refuses duplicate Gateway server port names": {
			doc:     gw + "spec: {servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}, {port: {number: 8080, name: http, protocol: HTTP}, hosts: ['*']}]}",
			verdict: refuse, say: "duplicate",
		},
		"refuses a WorkloadEntry unix address that is a directory": {
			doc: we + "spec: {address: 'unix:///dir/'}", verdict: refuse, say: "unix",
		},
		"refuses a WorkloadEntry unix address that is relative": {
			doc: we + "spec: {address: 'unix://relative'}", verdict: refuse, say: "unix",
		},
		"refuses a WorkloadEntry unix address with ports": {
			doc: we + "spec: {address: 'unix:///sock', ports: {http: 80}}", verdict: refuse, say: "ports",
		},
		"accepts a root route that delegates and also answers directly, as Istio does": {
			doc:     vsHead + "spec: {hosts: [a], http: [{delegate: {name: d}, directResponse: {status: 204}}]}",
			verdict: accept,
		},
		"accepts weights that do not add up to 100 (they are relative)": {
			doc:     vsHead + "spec: {hosts: [a], http: [{route: [{destination: {host: a, subset: v1}, weight: 70}, {destination: {host: a, subset: v2}, weight: 20}]}]}",
			verdict: accept,
		},
		"refuses an empty portLevelMtls": {
			doc: pa + "spec: {selector: {matchLabels: {app: a}}, portLevelMtls: {}}", verdict: refuse, say: "portLevelMtls",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gk, raw := gkOf(t, tc.doc)
			w, err := Check(gk, raw)
			got, said := accept, ""
			switch {
			case err != nil:
				got, said = refuse, err.Error()
			case len(w.Istio) > 0:
				got, said = warn, strings.Join(w.Istio, "; ")
			}
			if got != tc.verdict || !strings.Contains(said, tc.say) {
				t.Fatalf("verdict %s (%s), want %s saying %q", got, said, tc.verdict, tc.say)
			}
		})
	}
}

type verdict string

const (
	accept verdict = "accept"
	warn   verdict = "warn"
	refuse verdict = "refuse"
)
