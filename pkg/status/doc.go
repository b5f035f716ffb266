// Package status reports on the Istio resources themselves: proxies'
// rejections (NACKs) of configuration built from them (Reporter), and what
// discovery ignores of them (Auditor).
//
// # Rejections (Reporter)
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
//
// # What discovery ignores (Auditor)
//
// In: model.Updates (Observe, subscribed to the Store) and the World.
// Unsupported judges each Istio config: a kind the xDS generator does not
// read at all (gen.ReadsKind: TrafficExtension, ProxyConfig, ...) has no effect; of the
// others, the fields gen.UnsupportedFields names have none. That is the
// same table the generator's own warnings and the validating webhook use,
// so the four reports cannot disagree.
//
// Out, on every replica (Start): a Warn log line once per version of each
// config (its generation; in file mode its content hash), whether or not a
// proxy uses it, and the gauge discovery_config_unsupported_fields{kind,
// field} (field "*" for an unread kind). /debug/configz adds an
// "unsupported" entry (kind, fields, message) to each such config
// (ConfigzNote), which is what file mode shows instead of a status.
//
// Out, on the leader with a cluster (Lead): the condition
//
//	type: discovery.meshplane.io/UnsupportedFields
//	status: "True"
//	reason: FieldsNotSupported     (or KindNotSupported)
//	message: 'not supported by discovery yet, these fields have no effect: spec.http[].retries.retryRemoteLocalities'
//	observedGeneration: 3
//
// present only while something is ignored, removed when it no longer is.
//
// Beside it, the same way, the condition discovery.meshplane.io/Refused
// (reason BreaksEnvoyRules) while the config holds values Envoy refuses
// (gen.EnvoyRefusals: header names and values, empty prefixes, regexes):
// what is built from them fails closed (gen's containment), the rest of
// the mesh is served. The gauge discovery_config_refused{kind} counts such
// configs and /debug/configz lists them under "refused".
// It is level-triggered: a resource is queued when the condition its World
// object carries differs from the one it should carry, so nothing is
// written while nothing changes, and a new leader corrects whatever it
// finds. The queue holds each resource at most once; reconciliations are
// rate-limited (--status-unsupported-qps, --status-unsupported-burst); a
// write is a read, modify and update of the status subresource that keeps
// every other condition (ProxyRejected, other controllers') and status
// field, retried at once on conflict and then with an exponential back-off
// (1s to 5m). A resource whose generation moved on is left to the judgement
// of its newer spec. Nothing of this runs on the xDS path: Observe only
// records keys.
//
// # Gateway API status
//
// On the leader, the same queue, rate limit and back-off keep the status
// of each Gateway API object in step with its translation's Report
// (GatewayClass and Gateway conditions, listener status, a route's
// status.parents entries of istio.io/gateway-controller), merged with
// what other controllers wrote: see gatewayapi_status.go.
//
// Why a condition and not status.validationMessages: Istio's analysis
// messages (istio.io/api analysis/v1alpha1 AnalysisMessageBase) carry only
// a type (an IST0000-style code from Istio's own registry), a level and a
// documentation URL into istio.io, no text, so they could not name the
// fields; and istiod's in-cluster analysis owns that list outright (it
// rewrites it whole on each resource it reports on), so two writers would
// erase each other.
// An IstioCondition has a reason and a free-text message that `kubectl get
// -o yaml` and `kubectl describe` show as they are, and merges by type
// beside the conditions of others.
package status
