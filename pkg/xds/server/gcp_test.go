package server

import (
	"context"
	"io"
	"reflect"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"google.golang.org/grpc"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// The tests here hold go-control-plane's state-of-the-world server to
// what gcp.go assumes when it writes into its maps. They drive the real
// server with a cache that records what it is given; a go-control-plane
// upgrade that copies a map, or changes one outside the order gcp.go
// relies on, fails here. (Delta streams are served by deltastream.go;
// deltastream_test.go holds their subscriptions to go-control-plane's
// rules.)

// watchCall is one CreateWatch or CreateDeltaWatch the servers made.
type watchCall struct {
	sotwReq  *cachev3.Request
	deltaReq *cachev3.DeltaRequest
	sub      cachev3.Subscription
	sotwCh   chan cachev3.Response
	deltaCh  chan cachev3.DeltaResponse
}

type recordingCache struct {
	mu    sync.Mutex
	calls chan *watchCall
	// cancelled holds, per call, a copy of the returned map at
	// cancellation.
	cancelled map[*watchCall]map[string]string
}

func newRecordingCache() *recordingCache {
	return &recordingCache{calls: make(chan *watchCall, 8), cancelled: map[*watchCall]map[string]string{}}
}

func (rc *recordingCache) cancel(c *watchCall) func() {
	return func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		cp := map[string]string{}
		for k, v := range c.sub.ReturnedResources() {
			cp[k] = v
		}
		rc.cancelled[c] = cp
	}
}

func (rc *recordingCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	c := &watchCall{sotwReq: req, sub: sub, sotwCh: ch}
	rc.calls <- c
	return rc.cancel(c), nil
}

func (rc *recordingCache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	c := &watchCall{deltaReq: req, sub: sub, deltaCh: ch}
	rc.calls <- c
	return rc.cancel(c), nil
}

func (*recordingCache) Fetch(context.Context, *discovery.DiscoveryRequest) (cachev3.Response, error) {
	return nil, errNoFetch
}

func (rc *recordingCache) next(t *testing.T) *watchCall {
	t.Helper()
	select {
	case c := <-rc.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the server made no watch")
		return nil
	}
}

func (rc *recordingCache) cancelledWith(c *watchCall) (map[string]string, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m, ok := rc.cancelled[c]
	return m, ok
}

// fakeStream is a gRPC server stream of one message type.
type fakeStream[Req, Resp any] struct {
	grpc.ServerStream // not used by the servers beyond what is below
	ctx               context.Context
	in                chan *Req
	out               chan *Resp
}

func newFakeStream[Req, Resp any](ctx context.Context) *fakeStream[Req, Resp] {
	return &fakeStream[Req, Resp]{ctx: ctx, in: make(chan *Req, 1), out: make(chan *Resp, 1)}
}

func (s *fakeStream[Req, Resp]) Context() context.Context { return s.ctx }

func (s *fakeStream[Req, Resp]) Send(r *Resp) error {
	select {
	case s.out <- r:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *fakeStream[Req, Resp]) Recv() (*Req, error) {
	select {
	case r := <-s.in:
		return r, nil
	case <-s.ctx.Done():
		return nil, io.EOF
	}
}

func (s *fakeStream[Req, Resp]) recv(t *testing.T) *Resp {
	t.Helper()
	select {
	case r := <-s.out:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no response sent")
		return nil
	}
}

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestGoControlPlaneSotwMapContract(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc := newRecordingCache()
	srv := sotwv3.NewServer(ctx, rc, nil)
	st := newFakeStream[discovery.DiscoveryRequest, discovery.DiscoveryResponse](ctx)
	go func() { _ = srv.StreamHandler(st, gen.RouteType) }()

	st.in <- &discovery.DiscoveryRequest{TypeUrl: gen.RouteType, ResourceNames: []string{"a", "b"}}
	c1 := rc.next(t)
	subs1 := c1.sub.SubscribedResources()
	// Handed with a map, then written into after handing, as respondSotw
	// does (markReturned).
	next := map[string]string{}
	c1.sotwCh <- &cachev3.PassthroughResponse{Request: c1.sotwReq, DiscoveryResponse: &discovery.DiscoveryResponse{TypeUrl: gen.RouteType}, ReturnedResources: next}
	markReturned(next, []*gen.Resource{{Name: "a", Hash: "v1"}, {Name: "b", Hash: "v1"}})
	resp := st.recv(t)

	// The ACK: the subscription's returned map is the map handed over,
	// with what was written into it.
	st.in <- &discovery.DiscoveryRequest{TypeUrl: gen.RouteType, ResourceNames: []string{"a", "b"}, ResponseNonce: resp.GetNonce()}
	c2 := rc.next(t)
	if !sameMap(c2.sub.ReturnedResources(), next) {
		t.Fatal("go-control-plane copied the returned map a response carried: gcp.go's in-place writes are lost")
	}
	if got := c2.sub.ReturnedResources()["a"]; got != "v1" {
		t.Fatalf("returned[a] = %q after the write, want v1", got)
	}
	// Each request gets a new subscribed set; the old one is not changed
	// (unchanged keeps it to compare).
	subs2 := c2.sub.SubscribedResources()
	if reflect.ValueOf(subs1).UnsafePointer() == reflect.ValueOf(subs2).UnsafePointer() {
		t.Fatal("go-control-plane reused the subscribed-names map across requests: unchanged compares a map with itself")
	}
	if len(subs1) != 2 {
		t.Fatalf("the first request's subscribed set changed to %v", subs1)
	}

	// Unsubscribing b: the previous watch is cancelled before the
	// returned map is pruned, and pruned in place.
	st.in <- &discovery.DiscoveryRequest{TypeUrl: gen.RouteType, ResourceNames: []string{"a"}, ResponseNonce: resp.GetNonce()}
	c3 := rc.next(t)
	atCancel, ok := rc.cancelledWith(c2)
	if !ok {
		t.Fatal("the previous watch was not cancelled before the next CreateWatch")
	}
	if atCancel["b"] != "v1" {
		t.Fatalf("the returned map was pruned before the watch was cancelled: %v", atCancel)
	}
	if _, has := c3.sub.ReturnedResources()["b"]; has || !sameMap(c3.sub.ReturnedResources(), next) {
		t.Fatalf("want b pruned from the same map; got %v (same map: %v)", c3.sub.ReturnedResources(), sameMap(c3.sub.ReturnedResources(), next))
	}
	// A dropped response is undone on the live map (unmarkReturned).
	unmarkReturned(c3.sub, []string{"a"})
	if _, has := next["a"]; has {
		t.Fatal("unmarkReturned did not reach the subscription's map")
	}
}
