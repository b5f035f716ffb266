package server

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// A delta stream keeps of its node what identifies it, not the metadata
// and extensions it was registered from: the watch an acknowledgement
// leaves waiting holds its request, and the request the node.
func TestDeltaStreamKeepsNoFullNode(t *testing.T) {
	store := meshStore(t, 2)
	ts := startServer(t, store)
	n := node(sidecarID, map[string]any{"NAMESPACE": "ns-0", "LABELS": map[string]any{"app": "a"}})
	n.Cluster = "a.ns-0"
	n.Extensions = []*corev3.Extension{{Name: "envoy.filters.http.router", Category: "envoy.filters.http"}}
	_, r := ackedDeltaCDS(t, ts, n)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var held *corev3.Node
		waiting := false
		ts.s.conns.Range(func(_, v any) bool {
			cn := v.(*conn)
			cn.mu.Lock()
			defer cn.mu.Unlock()
			if w := cn.of(gen.ClusterType).delta; w != nil && w.req.GetResponseNonce() == r.GetNonce() {
				waiting, held = true, w.req.GetNode()
			}
			return true
		})
		if waiting {
			if held.GetId() != sidecarID || held.GetCluster() != "a.ns-0" {
				t.Errorf("the waiting request's node is %q of cluster %q, want the stream's ID and cluster", held.GetId(), held.GetCluster())
			}
			if held.GetMetadata() != nil || len(held.GetExtensions()) > 0 {
				t.Errorf("the waiting request holds the node's metadata or extensions")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the acknowledgement left no watch waiting")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
