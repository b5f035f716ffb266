package server

import (
	"runtime"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// withBudget makes the response budget size bytes with waits of wait
// for the test, and returns it.
func withBudget(t *testing.T, size int64, wait time.Duration) *sendBudget {
	t.Helper()
	b := newSendBudget(size, wait)
	old := responseBudget.Swap(b)
	t.Cleanup(func() { responseBudget.Store(old) })
	return b
}

// held is how much of b is taken.
func held(b *sendBudget) int64 { return b.used.Load() }

// Large messages in flight take from the budget until released; one that
// finds it spent waits for an earlier one to be released, and is made
// when it is.
func TestLargeMessagesWaitForTheBudget(t *testing.T) {
	const n = 1 << 20
	cost := messageCost(n, 100)
	b := withBudget(t, 2*cost+cost/2, time.Minute)
	m1, m2 := getMessage(n, 100, b), getMessage(n, 100, b)
	if got := held(b); got != 2*cost {
		t.Fatalf("two messages hold %d of the budget, want %d", got, 2*cost)
	}
	made := make(chan *pooledMessage)
	go func() { made <- getMessage(n, 100, b) }()
	select {
	case <-made:
		t.Fatal("a third message was made with the budget spent")
	case <-time.After(100 * time.Millisecond):
	}
	m1.release()
	var m3 *pooledMessage
	select {
	case m3 = <-made:
	case <-time.After(10 * time.Second):
		t.Fatal("a released message's share did not let the waiting one be made")
	}
	if b.waits.Load() != 1 || b.overruns.Load() != 0 {
		t.Errorf("%d waits and %d overruns, want 1 and 0", b.waits.Load(), b.overruns.Load())
	}
	m2.release()
	m3.release()
	if got := held(b); got != 0 {
		t.Errorf("%d of the budget held with every message released", got)
	}
	// Small messages are not pooled and take nothing.
	if getMessage(minPooled-1, 10, b) != nil || held(b) != 0 {
		t.Error("a small message was pooled or charged")
	}
}

// A message waits at most the budget's wait, then is made uncounted; one
// larger than the whole budget is made when nothing else is in flight.
func TestBudgetWaitIsBounded(t *testing.T) {
	const n = 1 << 20
	b := withBudget(t, messageCost(n, 100), 50*time.Millisecond)
	m1 := getMessage(n, 100, b)
	m2 := getMessage(n, 100, b) // waits 50 ms, then goes uncounted
	if b.overruns.Load() != 1 {
		t.Fatalf("%d overruns, want 1", b.overruns.Load())
	}
	m2.release() // gives back nothing: it took nothing
	if got := held(b); got != b.size {
		t.Errorf("%d of the budget held, want %d (the first message's)", got, b.size)
	}
	m1.release()
	big := getMessage(4*n, 100, b) // more than the budget: takes all of it
	if got := held(b); got != b.size || b.overruns.Load() != 1 {
		t.Errorf("a message larger than the budget: %d held, %d overruns", got, b.overruns.Load())
	}
	big.release()
}

// A message gRPC never frees gives its share back when collected.
func TestDroppedMessageGivesItsShareBack(t *testing.T) {
	const n = 1 << 20
	b := withBudget(t, 4*messageCost(n, 100), time.Minute)
	getMessage(n, 100, b).refs.Add(1) // referenced, never freed, dropped
	if held(b) == 0 {
		t.Fatal("the message took nothing")
	}
	deadline := time.Now().Add(30 * time.Second)
	for held(b) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a collected message's share was never given back")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// A large delta response takes its memory from the budget until gRPC
// frees it; a state-of-the-world one, whose resources are made before it
// is marshalled, takes nothing.
func TestOnlyDeltaResponsesTakeTheBudget(t *testing.T) {
	b := withBudget(t, 1<<30, time.Minute)
	set := perAddressView(t)
	delta, err := Codec().Marshal(&deltaWire{resp: &discovery.DeltaDiscoveryResponse{TypeUrl: gen.ListenerType, Nonce: "1"}, view: set})
	if err != nil {
		t.Fatal(err)
	}
	if held(b) == 0 {
		t.Fatal("a large delta response took nothing of the budget")
	}
	delta.Free()
	if held(b) != 0 {
		t.Fatalf("%d of the budget held after the response was freed", held(b))
	}
	sotw := &discovery.DiscoveryResponse{TypeUrl: gen.ListenerType, VersionInfo: "v1", Nonce: "1"}
	for _, n := range set.Names {
		sotw.Resources = append(sotw.Resources, set.Get(n).Wire())
	}
	bs, err := Codec().Marshal(sotw)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Free()
	if p, ok := bs[0].(*part); !ok || p.m == nil {
		t.Fatal("the state-of-the-world response is not pooled: the test shows nothing")
	}
	if held(b) != 0 {
		t.Errorf("a state-of-the-world response took %d of the budget", held(b))
	}
}
