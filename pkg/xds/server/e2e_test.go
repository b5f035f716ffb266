package server

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/grpctest"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// sliceAt is an EndpointSlice of ns/svc with one ready address serving
// the grpc port on port.
func sliceAt(ns, svc, name, addr string, port int32) model.Event {
	pn, ready := "grpc", true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pn, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindEndpointSlice, Namespace: ns, Name: name}, Object: es}
}

func TestGRPCClientFollowsEndpoints(t *testing.T) {
	addrA, portA := grpctest.Backend(t)
	addrB, portB := grpctest.Backend(t)
	store := model.NewStore(model.StoreOptions{})
	apply(t, store, worldtest.Service("ns1", "echo", "10.96.0.50"), sliceAt("ns1", "echo", "echo-a", "127.0.0.1", portA))
	ts := startServer(t, store)

	client := grpctest.Dial(t, grpctest.Bootstrap(ts.addr, "ns1"), "xds:///echo.ns1.svc.cluster.local:7070")
	call := client.Call
	var last string
	var lastErr error
	eventually(t, "the first RPC to reach backend A through xDS", func() bool {
		last, lastErr = call()
		return lastErr == nil && last == addrA
	})
	first := ts.s.Syncz()
	if len(first) != 1 {
		t.Fatalf("%d xDS streams, want 1", len(first))
	}

	// Move the endpoints from A to B: traffic follows, on the same xDS
	// stream and the same client connection.
	apply(t, store,
		model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindEndpointSlice, Namespace: "ns1", Name: "echo-a"}},
		sliceAt("ns1", "echo", "echo-b", "127.0.0.1", portB))
	eventually(t, "RPCs to move to backend B", func() bool {
		last, lastErr = call()
		return lastErr == nil && last == addrB
	})
	for i := 0; i < 20; i++ {
		if got, err := call(); err != nil || got != addrB {
			t.Fatalf("RPC %d after the move went to %q (%v), want %s", i, got, err, addrB)
		}
	}
	after := ts.s.Syncz()
	if len(after) != 1 || !after[0].Connected.Equal(first[0].Connected) {
		t.Fatalf("the xDS stream was replaced: before %+v after %+v", first, after)
	}
	if n := ts.counter(t, "pilot_xds_pushes", "type", "cds") + ts.counter(t, "pilot_xds_pushes", "type", "lds"); n != 2 {
		t.Errorf("%v CDS+LDS responses, want 2 (one each; the move is endpoints only)", n)
	}
	if eds := after[0].Types["eds"]; eds == nil || eds.AckedVersion == first[0].Types["eds"].AckedVersion || eds.LastNACK != nil {
		t.Errorf("EDS status after the move: %+v (want a new acknowledged version and no NACK)", eds)
	}
}
