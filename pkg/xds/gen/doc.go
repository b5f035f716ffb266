// Package gen turns a World into Envoy configuration.
//
// In: a *model.World and a *model.Proxy (its class: type, namespace,
// generator, version).
//
// Out: validated, marshaled xDS resources (clusters, endpoints, listeners,
// routes, and the extension configurations of WasmPlugins, ECDS: wasm.go)
// grouped in Sets by type URL. Generation is a pure function of its
// inputs. What depends only on a proxy's class (ClassConfig) is built once
// per class and shared by every proxy of that class; the per-proxy part
// (ProxyConfig: inbound clusters and the virtualInbound listener) is small.
//
// Names follow Istio's conventions: clusters outbound|PORT|SUBSET|HOST and
// inbound|PORT||, BlackHoleCluster, PassthroughCluster,
// InboundPassthroughCluster; listeners virtualOutbound (15001),
// virtualInbound (15006) and 0.0.0.0_PORT; proxyless gRPC API listeners
// HOST:PORT.
//
// Route shape: one RouteConfiguration per service port, named HOST:PORT,
// selected by the service's address in the port's outbound listener (a
// filter chain per address), plus one RouteConfiguration per port, named
// PORT, for the hosts that have no address (headless services). Istio puts
// every virtual host of a port into one RouteConfiguration named after the
// port, so one VirtualService edit re-sends every visible service's routes
// (about 1 MB per proxy at 1,000 services). Here the edit re-sends one small
// RouteConfiguration. The proxy pays with one filter chain and one
// HttpConnectionManager per service address on the port's listener and one
// RDS subscription per service port; a service added or removed re-sends
// the port's listener (LDS is state of the world either way). The
// destination address picks the service: its virtual host also has the
// domain "*", so any Host header sent to the address gets its routes,
// where istiod picks the virtual host of its port route by Host (a Host
// naming no visible service takes allow_any, plaintext to the address,
// one naming another service of the port that service's routes). A port
// without a protocol Istio knows is sniffed on sidecars, as istiod does
// (sniff.go): its addresses have an HTTP chain, with the route HOST:PORT,
// beside the TCP one.
//
// MeshConfig and telemetry: generation reads the World's MeshConfig
// (meshconfig.go: root namespace, exportTo defaults, connect timeout,
// traffic policies, auto mTLS, trust domain aliases) and builds Istio's
// telemetry filters, access logs and tracing per proxy class and traffic
// class (telemetry.go and telemetrytracing.go decide with the Telemetry
// API's rules, telemetryfilters.go, telemetrylogs.go and tracingbuild.go
// build). Tracing tags name the proxy: with tracing on, ClassKey also
// names what the tracing reads of the proxy. A class's listeners are
// reused only for the same telemetry key, so an unrelated change does not
// rebuild them; a MeshConfig change rebuilds every class.
package gen
