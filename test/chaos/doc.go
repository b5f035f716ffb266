// Package chaos is the reliability suite: discovery serve as real
// processes on a real etcd and kube-apiserver (internal/testenv), with the
// load tool's simulated proxies (test/load/loadkit), through faults:
//
//  1. kill -9 of the only replica with proxies connected, and a restart;
//  2. the API server down while changes queue, etcd restarted, watches
//     that expire (410 Gone) and lists again;
//  3. three replicas, a rolling restart (SIGTERM drain) and a killed
//     leader;
//  4. every proxy reconnecting within a second to a fresh replica;
//  5. a tenth of the proxies never ACKing or reading slowly;
//  6. one class of proxies rejecting a change that every proxy sees, with
//     pushes in waves (--xds-push-wave): only its first wave receives it.
//
// Each scenario reports the proxies that ended with the correct
// configuration (checked against the World, not the server), the time
// until all were correct again, NACKs, errors in the server logs and the
// servers' peak RSS, plus figures of its own. The small versions run in
// `go test` (make test); `make chaos` runs the big ones
// (-chaos.scale=big) and writes the reports under test/chaos/results.
// RELIABILITY.md at the repository root publishes them.
package chaos
