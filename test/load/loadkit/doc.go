// Package loadkit is the machinery of the load tool (discovery-load) that
// other harnesses reuse: a generated mesh written into a config directory
// or an API server (World) and changed the way an operator would (Edit);
// simulated sidecars (Fleet), each a real delta or state-of-the-world ADS
// client over gRPC that decodes and validates everything as Envoy would
// and ACKs it; a tracker that times each change until every proxy holds
// it; a check of what every proxy holds against the World (Verify); and
// the discovery serve processes under test with their CPU and RSS read
// from /proc (Launch, Sampler).
//
// In: the World's options, the fleet's options, a discovery binary. Out:
// per-change convergence times, bytes and responses received, NACKs,
// streams dropped, the time proxies spent without a complete
// configuration (Gaps), and the server's resource use.
package loadkit
