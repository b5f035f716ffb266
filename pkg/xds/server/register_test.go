package server

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// recordingRegistrar records what the server tells it.
type recordingRegistrar struct {
	refuse error
	mu     sync.Mutex
	events []string
}

func (r *recordingRegistrar) Connect(p *model.Proxy, caller *ca.Identity, _ time.Time) (bool, error) {
	r.add("connect " + p.ID)
	return r.refuse == nil, r.refuse
}

func (r *recordingRegistrar) Health(p *model.Proxy, healthy bool, message string, _ time.Time) {
	if healthy {
		r.add("healthy")
		return
	}
	r.add("unhealthy " + message)
}

func (r *recordingRegistrar) Disconnect(p *model.Proxy, _ time.Time) { r.add("disconnect " + p.ID) }

func (r *recordingRegistrar) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recordingRegistrar) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

const vmID = "sidecar~10.0.0.7~vm-1.shop~shop.svc.cluster.local"

func TestRegistrarHearsConnectHealthAndDisconnect(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	reg := &recordingRegistrar{}
	ts := startServer(t, store)
	ts.s.SetRegistrar(reg)
	c := newSotwClient(t, dial(t, ts.addr), node(vmID, map[string]any{"AUTO_REGISTER_GROUP": "ratings"}))
	c.send(gen.ClusterType, nil, "", "", "")
	c.ack(c.next(), nil)
	c.send(HealthType, nil, "", "", "connect: connection refused")
	c.send(HealthType, nil, "", "", "")
	// A health report is never answered: the next response is the
	// Listener's (ordered ADS answers in order).
	c.send(gen.ListenerType, nil, "", "", "")
	if r := c.next(); r.GetTypeUrl() != gen.ListenerType {
		t.Fatalf("got a %s response, want the Listener's", r.GetTypeUrl())
	}
	c.cancel()
	want := []string{"connect " + vmID, "unhealthy connect: connection refused", "healthy", "disconnect " + vmID}
	eventually(t, "the disconnect", func() bool { return len(reg.seen()) == len(want) })
	for i, e := range reg.seen() {
		if e != want[i] {
			t.Errorf("event %d = %q, want %q (all: %q)", i, e, want[i], reg.seen())
		}
	}
}

func TestRegistrarRefusalEndsTheStream(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	reg := &recordingRegistrar{refuse: grpcstatus.Error(codes.FailedPrecondition, "auto-registration: WorkloadGroup shop/ratings not found")}
	ts := startServer(t, store)
	ts.s.SetRegistrar(reg)
	c := newSotwClient(t, dial(t, ts.addr), node(vmID, map[string]any{"AUTO_REGISTER_GROUP": "ratings"}))
	c.send(gen.ClusterType, nil, "", "", "")
	select {
	case err := <-c.errc:
		if grpcstatus.Code(err) != codes.FailedPrecondition {
			t.Fatalf("stream ended with %v, want FailedPrecondition", err)
		}
	case r := <-c.recv:
		t.Fatalf("a refused stream got a %s response", r.GetTypeUrl())
	case <-time.After(30 * time.Second):
		t.Fatal("the refused stream did not end")
	}
	// Untracked: no Disconnect follows a refused Connect.
	if got := reg.seen(); len(got) != 1 {
		t.Errorf("events %q, want the connect only", got)
	}
}
