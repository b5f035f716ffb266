// Package status reports proxies' rejections (NACKs) of configuration on
// the Istio resources it was generated from.
//
// In: server.Verdicts (xds/server's Observer): a proxy's ACK or NACK of a
// response, traced through gen's provenance to the Istio configs (kind,
// namespace, name, generation) its resources were built from.
//
// Out: on each such config, a status condition of type
// discovery.meshplane.io/ProxyRejected (status True, reason ProxyNACK, a
// message naming one proxy and Envoy's error, observedGeneration) and a
// Warning Event (reason ProxyRejectedConfig) naming the proxy and the
// error. The condition is set to False (reason ProxyAccepted) when a proxy
// acknowledges configuration built from a newer generation of that config.
// Other conditions are left as they are. Without a cluster (file mode)
// the Reporter only logs.
//
// The Reporter runs only on the leader (its Start); while it does not run,
// verdicts are not queued. It is best effort and bounded: the xDS path
// only queues; a full queue drops (counted), and each config gets at most
// one write and Event per --status-nack-interval for the same generation.
package status
