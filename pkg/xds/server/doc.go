// Package server delivers generated configuration to proxies over xDS.
//
// In: a model.Store (the current World and its Updates), proxies'
// discovery requests over gRPC.
//
// Out: the AggregatedDiscoveryService (state of the world and delta, ordered
// ADS) and the per-type CDS, EDS, LDS and RDS services. State of the world
// is served by go-control-plane's server/v3 with this package's own cache
// behind it (see conn.go); delta streams by this package's own loop
// (deltastream.go: a reader goroutine receives each request's bytes and
// the loop has a goroutine of its own decode and handle it, so that the
// two goroutines a stream keeps for its life keep small stacks), which
// keeps go-control-plane's protocol rules but holds
// each stream's subscribed names as a set shared with the streams that
// subscribe to the same names (subscription.go). Updates go through
// push.Debouncer; each proxy for which a change matters (push.Changes.For
// decides) gets one merged item in a push.Queue, whose workers yield after
// each proxy so that its connection's writer runs before the next
// (push.go); configuration is generated
// once per proxy class (push.Classes) and sent as the difference from what
// the proxy already has. A stream's first response for a type sends
// its class's set whole: encoded once and shared by the streams sent an
// equal set (routes composed of their groups' encodings, each shared by
// the classes that took the group, and dropped once no stream asked for
// it for 10 s, as are the last sets sent whole), or, for a variant's listeners, written from the base's
// plans (delta_whole.go); responses are written from the generator's
// marshaled bytes, shared, not copied (codec.go); a large response's own
// bytes come from a pool they return to once gRPC has written them
// (codec_pool.go), within a budget of memory in flight they wait for
// (codec_budget.go), and a delta request's resource names are decoded as
// views of one block, or of the request's own copy (codec_request.go), or
// are a shared set's own list when they are exactly its names
// (codec_request_shared.go).
// A rejected response (NACK) is counted and logged; the proxy keeps its
// last good configuration and is sent nothing more for that type until
// the configuration changes.
//
// An Observer (SetObserver; verdict.go) learns of every NACK, and of ACKs
// while it asks for them, as a Verdict naming the proxy, Envoy's error and
// the resources of the answered response; Verdict.Sources traces them to
// the Istio configs they were built from (pkg/status reports those).
//
// Gateway credentials (Gateway tls.credentialName) are served as SDS
// Secrets over ADS when Options.Credentials gave the server a Secret reader; a
// Secret goes only to gateways of its own namespace (see sds.go).
//
// Istio's debug types (istio.io/debug/syncz, istio.io/debug/config_dump,
// istio.io/debug; debugxds.go) are answered as istiod answers them, to
// authenticated callers only, which is what istioctl proxy-status and
// version ask for.
//
// Debug handlers: /debug/syncz (istiod's fields, then discovery's),
// /debug/config_dump?proxyID=ID (the node ID or <pod>.<namespace>) and
// /debug/push_status.
package server
