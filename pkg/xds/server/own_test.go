package server

import (
	"testing"

	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// TestRoutingChangesKeepTheProxysOwnConfiguration: a VirtualService edit
// is a full push that reuses each proxy's own (inbound) configuration; a
// PeerAuthentication change rebuilds it.
func TestRoutingChangesKeepTheProxysOwnConfiguration(t *testing.T) {
	store := meshStore(t, 2)
	ts := startServer(t, store)
	c := newSotwClient(t, dial(t, ts.addr), node(sidecarID, nil))
	c.send(gen.ClusterType, nil, "", "", "")
	c.ack(c.next(), nil)
	own := func() map[string]*gen.Set {
		var out map[string]*gen.Set
		ts.s.conns.Range(func(_, v any) bool {
			cn := v.(*conn)
			cn.mu.Lock()
			defer cn.mu.Unlock()
			out = cn.cfg.Own
			return false
		})
		return out
	}
	classID := func() uint64 {
		var id uint64
		ts.s.conns.Range(func(_, v any) bool {
			cn := v.(*conn)
			cn.mu.Lock()
			defer cn.mu.Unlock()
			id = cn.cfg.Class.ID
			return false
		})
		return id
	}
	before, id := own(), classID()
	apply(t, store, vsEdit("ns-0", "svc-0", "2", 30))
	eventually(t, "the VirtualService edit to be pushed", func() bool { return classID() != id })
	if after := own(); after[gen.ListenerType] != before[gen.ListenerType] {
		t.Errorf("a VirtualService edit rebuilt the proxy's own listener")
	}
	evs, err := worldtest.Decode([]byte(`
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: ns-0}
spec: {mtls: {mode: STRICT}}
`))
	if err != nil {
		t.Fatal(err)
	}
	mid, id := own(), classID()
	apply(t, store, evs...)
	eventually(t, "the PeerAuthentication to be pushed", func() bool { return classID() != id || own()[gen.ListenerType] != mid[gen.ListenerType] })
	eventually(t, "the proxy's own listener to be rebuilt", func() bool { return own()[gen.ListenerType] != mid[gen.ListenerType] })
}
