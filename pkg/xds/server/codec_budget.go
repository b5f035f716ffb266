package server

import (
	"context"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/mem"
)

// The memory of large responses in flight is bounded.
//
// A large response's own memory (a pooled message: codec_pool.go) lives
// from its marshalling until gRPC has written it, which is as long as
// its proxy takes to read it. When 1,000 proxies connect at once, each is
// sent its listeners whole (a header buffer of about 1.1 MB and lists of
// some 10,000 buffers at M1) as soon as they are generated, and the
// collector found 57 MB of such messages and 23 MB of their grown lists
// live in the middle of M1's connect (BENCHMARKS.md): the heap then grows
// to twice that, and the process's RSS never gives it back.
//
// So a large message takes its memory from a budget before it is made
// and gives it back when it is released. A message that finds the budget
// spent waits, first come first served, for earlier ones to be written;
// the wait is bounded (sendBudget.wait), after which it is made anyway,
// uncounted: a proxy that does not read holds its message's share until
// its stream's send timeout closes it, and no other proxy waits on it
// longer than that. A message larger than the whole budget takes all of
// it: it waits until nothing else is in flight.
//
// Only delta responses take from it (sliceWriter.budget): a
// state-of-the-world response's resources are made before it is
// marshalled, and waiting held them longer than the budget saved.

// sendBudget is a budget of bytes, taken first come first served.
type sendBudget struct {
	sem  *semaphore.Weighted
	size int64
	// wait bounds how long a message waits for the budget.
	wait time.Duration
	// used is what messages hold of it; waits counts the messages that
	// waited, overruns those of them made uncounted after wait.
	used, waits, overruns atomic.Int64
}

func newSendBudget(size int64, wait time.Duration) *sendBudget {
	return &sendBudget{sem: semaphore.NewWeighted(size), size: size, wait: wait}
}

// responseBudget bounds the memory of large messages in flight: 8 MiB,
// about five proxies' listeners written whole at M1; a message waits at
// most a second for it. With 24 MiB the collector found 22 MB of
// messages live at M1's connect peak, which the heap's goal doubled;
// halved, the peak RSS while connecting fell by 20-30 MiB. At 12 MiB the
// collection at the end of M1's connect still found 11 MB of them, and
// its goal set the run's peak once the service changes held less; at 8
// MiB the peak was 280-307 MiB in seven runs against 287-305 in eleven.
// Neither step moved connect's CPU or the time to configure every proxy
// beyond the machine's spread (BENCHMARKS.md, "Services added edit the
// listeners" and "Write buffers held across a push").
var responseBudget atomic.Pointer[sendBudget]

func init() { responseBudget.Store(newSendBudget(8<<20, time.Second)) }

// charge is what a message holds of a budget (n 0: nothing). It is kept
// apart from the message so that a message gRPC never frees gives its
// share back when it is collected (runtime.AddCleanup).
type charge struct {
	n    atomic.Int64
	from *sendBudget
}

// messageCost is the memory a message of n header bytes and buffers
// buffers takes from the pool: what it is charged.
func messageCost(n, buffers int) int64 {
	return int64(n) + int64(buffers)*int64(unsafe.Sizeof(part{})+unsafe.Sizeof(mem.Buffer(nil)))
}

// take takes n of b, waiting for it if need be, and returns what it
// took: 0 when it waited b.wait in vain.
func (b *sendBudget) take(n int64) int64 {
	n = min(n, b.size)
	if b.sem.TryAcquire(n) {
		b.used.Add(n)
		return n
	}
	b.waits.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), b.wait)
	defer cancel()
	if err := b.sem.Acquire(ctx, n); err != nil {
		b.overruns.Add(1)
		return 0
	}
	b.used.Add(n)
	return n
}

// hold makes c hold n of b.
func (c *charge) hold(b *sendBudget, n int64) {
	c.from = b
	c.n.Store(n)
}

// give returns what c holds to its budget.
func (c *charge) give() {
	if n := c.n.Swap(0); n > 0 {
		c.from.used.Add(-n)
		c.from.sem.Release(n)
	}
}
