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
// the port's listener (LDS is state of the world either way), unless
// Options.ListenersPerAddress moves each address's chains to a listener
// of its own (listener_address.go): then it sends one small listener. The
// destination address picks the service: its virtual host also has the
// domain "*", so any Host header sent to the address gets its routes,
// where istiod picks the virtual host of its port route by Host (a Host
// naming no visible service takes allow_any, plaintext to the address,
// one naming another service of the port that service's routes). A port
// without a protocol Istio knows is sniffed on sidecars, as istiod does
// (listener_sniff.go): its addresses have an HTTP chain, with the route
// HOST:PORT, beside the TCP one.
//
// MeshConfig and telemetry: generation reads the World's MeshConfig
// (meshconfig.go: root namespace, exportTo defaults, connect timeout,
// traffic policies, auto mTLS, trust domain aliases) and builds Istio's
// telemetry filters, access logs and tracing per proxy class and traffic
// class (telemetry.go and telemetry_tracing.go decide with the Telemetry
// API's rules, telemetry_filters.go, telemetry_logs.go and
// telemetry_tracing_build.go build). Tracing tags name the proxy: with tracing on, ClassKey also
// names what the tracing reads of the proxy. Sidecars that differ in the
// service tags alone are variants of one class (class_variant.go), and
// with Options.SharedTags that class is generated with placeholders for
// the tags' values, so that the namespaces' classes share their
// listeners (class_shared.go). A class's listeners are
// reused only for the same telemetry key, so an unrelated change does not
// rebuild them; a MeshConfig change rebuilds every class.
//
// # What generation reads
//
// Generation code never holds a *model.World: it reads through a view
// (reads_view.go) that records each read in a Reads, on the unit being built
// (a service's clusters and endpoints, its routes, a port's listener, a
// shared part, the class, a proxy's own configuration). A unit reused
// from the previous generation brings its Reads along. The push planner
// (pkg/xds/push) asks ProxyConfig.Touched whether a change can alter a
// configuration; nothing else knows which kinds matter to whom, so a new
// Istio kind is read with a view method (Config, ConfigsWhere, ConfigsIn,
// or a new one beside the index lookups in reads.go) and is pushed to
// exactly the proxies that read it. TestGenerationReadsOnlyThroughViews
// fails on a function that reaches the World past the views;
// TestPushPlanCoversEveryChangedProxy (pkg/xds/push) fails on a read that
// is not recorded, or lost in reuse.
//
// Reuse follows from the same Reads: a unit (a service's clusters and
// endpoints, its routes), a port's outbound listener and a part shared
// between classes are reused when no change since the World they were
// judged in touches what they read (the World's change log says what
// changed: model.World.ChangesSince), and when every selection they took
// from the class's scope (a host's VirtualServices and DestinationRule,
// its aliases, a port's services: reads_scope.go) gets the same answer
// from the new scope. No reuse key names inputs by hand. The same rule
// lets a sidecar class take the units and port listeners of a class of
// another namespace whose key is otherwise equal (class_sibling.go): the
// proxies' namespace is a scope question too (Scope.inNamespace: a
// service's short host name, a match's sourceNamespace), so what a class
// builds differently from its sibling is what asked it or got another
// answer from its scope.
// TestReuseRebuildsWhatAChangeTouches checks that a change rebuilds what
// read it and nothing else; TestScopeSelectionsAreRecorded that no
// scope selection is taken unrecorded.
//
// # File map
//
// A file's prefix says what it produces or decides; its _test.go files
// share the name.
//
//   - Generation and reuse: generator.go (Generator, Options, New;
//     Options.Generating bounds the classes generated at once),
//     reads.go (Reads: what a configuration read, Touches, stands),
//     reads_view.go (the recording views generation reads through),
//     reads_scope.go (selections taken from the class's scope, with
//     their answers), reads_changes.go (what changed between two
//     Worlds, as reads are asked about it),
//     class.go (Class), builder.go (a type's resources collected, and
//     the previous generation's log replayed), builder_edit.go (the log
//     followed through a service added or removed),
//     builder_edit_memo.go (a set's last edit and its result, given to
//     the classes that make the same edit), builder_log_pool.go (equal
//     logs shared, a log's last edit, and which operation put in each
//     name),
//     class_endpoints.go (UpdateEndpoints),
//     class_history.go (what a class changed over its last steps; a
//     replaced configuration's logs let go),
//     class_key.go (which proxies share a class; the World's index),
//     class_sibling.go (what a class takes from the class of another
//     namespace),
//     class_parts.go (clusters and endpoints shared between classes),
//     proxy.go (one proxy's configuration), proxy_inbound_shared.go (a
//     variant's inbound listener, a view of one set its peers share),
//     resource.go (Resource, Set), resource_names.go (equal lists of
//     names shared),
//     resource_all.go (a set written whole, and the groups a class's set
//     was built from), resource_versions.go (equal sets and their
//     Versions shared, and what is made of them: Memo),
//     contain.go (what one bad config may cost), provenance.go (the configs a
//     rejected resource came from), warn.go and kinds.go (what is not
//     supported, and reported), envoy_refusals.go (what Envoy would
//     reject, refused before it is sent).
//   - What a class sees: scope.go (visible services, shared by the
//     classes that see the same ones, VirtualServices and
//     DestinationRules), scope_vs.go (VirtualService precedence),
//     scope_sidecar.go (the Sidecar's egress), meshconfig.go,
//     trust_domain.go.
//   - Clusters: cluster.go (fixed and inbound clusters),
//     cluster_outbound.go, cluster_policy.go (DestinationRule traffic
//     policy), cluster_drselect.go (which DestinationRule applies),
//     cluster_automtls.go, cluster_serviceentry.go, grpc_security.go
//     (proxyless gRPC TLS, both sides).
//   - Endpoints: endpoint.go, endpoint_locality.go (locality load
//     balancing), endpoint_mtls.go (what clients read of
//     PeerAuthentication).
//   - Listeners: listener.go (names, connection managers),
//     listener_inbound.go (Sidecar ingress and the inbound ports),
//     listener_inbound_passthrough.go, listener_sniff.go (protocol
//     sniffing), listener_headless.go, listener_outbound_policy.go
//     (ALLOW_ANY / REGISTRY_ONLY), listener_vs_tcp.go (VirtualService tcp
//     and tls routes), listener_grpc_server.go (xDS-enabled gRPC
//     servers), listener_address.go (outbound listeners per service
//     address, Options.ListenersPerAddress; listener_address_build.go,
//     the listeners it marshals; listener_address_reuse.go, what a split
//     reuses from the previous one; listener_port.go, a port's listener
//     built whole or split, reused or taken (sidecarOutbound);
//     listener_derive.go, a split derived from the previous one when
//     only the port's HTTP services changed), listener_memo.go (a port
//     listener's HTTP chains kept as marshaled for its next build, and
//     its fields for a split as built).
//   - Routes: route.go (virtual hosts, default routes), route_vs.go (http
//     routes), route_vs_select.go (which VirtualServices, shadowing),
//     route_vs_delegate.go, route_vs_jwt.go (JWT claim routing),
//     route_vs_metrics.go, route_retry.go, route_filters.go (per-route
//     filter configuration: fault, CORS).
//   - Gateways: gateway.go (servers to listeners), gateway_server.go,
//     gateway_tls.go, gateway_credential.go (SDS Secrets), gateway_tcp.go,
//     gateway_passthrough.go, gateway_autopassthrough.go, gateway_authz.go.
//   - Security filters: authn_mtls.go (PeerAuthentication, inbound TLS),
//     authn_jwt.go (RequestAuthentication), authz.go (RBAC filters),
//     authz_match.go, authz_values.go (what fails closed), authz_jwt.go,
//     authz_custom.go and authz_extauthz.go (CUSTOM, ext_authz).
//   - Telemetry: telemetry.go (the Telemetry API's rules),
//     telemetry_class.go, telemetry_filters.go, telemetry_logs.go,
//     telemetry_tracing.go, telemetry_tracing_build.go.
//   - Extensions: wasm.go and wasm_apply.go (WasmPlugin over ECDS),
//     envoyfilter.go, envoyfilter_apply.go, envoyfilter_lastgood.go;
//     workloadgroup.go.
package gen
