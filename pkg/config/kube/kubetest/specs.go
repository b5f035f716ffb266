package kubetest

// ValidSpecs is one valid spec of each Istio kind, by kind, in YAML flow
// style: what an istio.io task or sample would apply. Istio's CRDs and
// its validation accept each, in every version the kind's CRD serves.
// Tests that apply "one object of every Istio kind" read it, and check
// that it covers every CRD they install.
var ValidSpecs = map[string]string{
	"VirtualService":        `{hosts: [reviews], http: [{route: [{destination: {host: reviews, subset: v1}}], timeout: 3s}]}`,
	"DestinationRule":       `{host: reviews, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}, subsets: [{name: v1, labels: {version: v1}}]}`,
	"Gateway":               `{selector: {istio: ingressgateway}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]}`,
	"ServiceEntry":          `{hosts: [api.example.com], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS, location: MESH_EXTERNAL}`,
	"Sidecar":               `{egress: [{hosts: ["./*", "istio-system/*"]}], outboundTrafficPolicy: {mode: REGISTRY_ONLY}}`,
	"WorkloadEntry":         `{address: 10.0.0.5, labels: {app: vm}, serviceAccount: vm}`,
	"PeerAuthentication":    `{selector: {matchLabels: {app: reviews}}, mtls: {mode: STRICT}}`,
	"AuthorizationPolicy":   `{action: ALLOW, rules: [{from: [{source: {namespaces: [default]}}], to: [{operation: {methods: [GET]}}]}]}`,
	"RequestAuthentication": `{jwtRules: [{issuer: "https://issuer.example.com", jwksUri: "https://issuer.example.com/jwks"}]}`,
	"Telemetry":             `{accessLogging: [{providers: [{name: envoy}]}]}`,
	"EnvoyFilter": `{configPatches: [{applyTo: HTTP_FILTER, match: {context: SIDECAR_INBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}},
		patch: {operation: INSERT_BEFORE, value: {name: envoy.filters.http.lua, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, inlineCode: "function envoy_on_request(h) end"}}}}]}`,
	"WorkloadGroup":    `{metadata: {labels: {app: vm}}, template: {serviceAccount: vm}, probe: {httpGet: {path: /ready, port: 8080}}}`,
	"ProxyConfig":      `{selector: {matchLabels: {app: reviews}}, concurrency: 2, image: {imageType: distroless}, environmentVariables: {A: b}}`,
	"WasmPlugin":       `{selector: {matchLabels: {app: reviews}}, url: "oci://ghcr.io/example/plugin:1", phase: AUTHN}`,
	"TrafficExtension": `{lua: {inlineCode: "function envoy_on_request(h) end"}}`,
}
