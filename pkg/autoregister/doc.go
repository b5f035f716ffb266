// Package autoregister registers the mesh's VMs: a proxy whose node asks
// for it (AUTO_REGISTER_GROUP) gets a WorkloadEntry made from its
// WorkloadGroup while it is connected, with its health as the entry's
// Healthy condition, as istiod's pilot/pkg/autoregistration does.
//
// In: the xDS server's stream events (server.Registrar: a proxy connected
// on an authenticated stream, reported its health, disconnected) and the
// World (WorkloadGroups and WorkloadEntries, read from the informers).
// Out: WorkloadEntries created, annotated, given a Healthy condition and
// deleted on the API server.
//
// The server's calls only change memory and queue the entry's name; one
// worker brings each entry to the state its streams ask for (a keyed,
// coalescing queue with per-key back-off, so a slow or failing API server
// never holds a stream and the queue holds at most one key per entry).
// Several replicas share entries the way istiod's do: the replica whose
// stream connected last writes istio.io/workloadController and
// istio.io/connectedAt, and only it marks the entry disconnected, writes
// health or deletes it. An entry whose proxy has been gone for the grace
// period is deleted; the leader also sweeps entries left behind by a
// replica that died before it could (every ten grace periods, as istiod).
package autoregister
