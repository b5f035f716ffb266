package push

import (
	"context"
	"sync"
)

// Queue holds at most one pending item per key. Pushing to a key that is
// already waiting merges the two items; a key being worked on is queued
// again after its worker finishes. Workers take keys in arrival order.
type Queue[K comparable, V any] struct {
	merge   func(old, new V) V
	handle  func(context.Context, K, V)
	workers int
	// idle, when set, is called each time the queue drains: a worker
	// finished and no key is waiting or being worked on.
	idle func()

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[K]V
	order   []K
	active  map[K]bool
	closed  bool
	// handled counts the items handled, so that one that saw the queue
	// drain can tell whether it has worked since (Quiet).
	handled uint64
}

// NewQueue returns a Queue that runs handle on at most workers keys at once.
func NewQueue[K comparable, V any](workers int, merge func(old, new V) V, handle func(context.Context, K, V)) *Queue[K, V] {
	q := &Queue[K, V]{merge: merge, handle: handle, workers: workers, pending: map[K]V{}, active: map[K]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Push adds or merges an item for k.
func (q *Queue[K, V]) Push(k K, v V) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if old, ok := q.pending[k]; ok {
		q.pending[k] = q.merge(old, v)
		return
	}
	q.pending[k] = v
	if !q.active[k] {
		q.order = append(q.order, k)
		q.cond.Signal()
	}
}

// Remove drops k's pending item, if any.
func (q *Queue[K, V]) Remove(k K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.pending, k)
}

// Len is the number of keys waiting.
func (q *Queue[K, V]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// OnIdle makes the queue call f each time it drains, from the worker that
// finished last; f must not block. Call it before Start.
func (q *Queue[K, V]) OnIdle(f func()) { q.idle = f }

// Quiet reports whether no key is waiting or being worked on, and how
// many items the queue has handled: a caller that finds the same count
// later, and the queue quiet again, knows it did nothing in between.
func (q *Queue[K, V]) Quiet() (bool, uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending) == 0 && len(q.active) == 0, q.handled
}

// Start runs the workers until ctx ends.
func (q *Queue[K, V]) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := 0; i < q.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.work(ctx)
		}()
	}
	<-ctx.Done()
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
	wg.Wait()
	return nil
}

func (q *Queue[K, V]) work(ctx context.Context) {
	for {
		k, v, ok := q.next()
		if !ok {
			return
		}
		q.handle(ctx, k, v)
		q.mu.Lock()
		delete(q.active, k)
		q.handled++
		if _, again := q.pending[k]; again {
			q.order = append(q.order, k)
			q.cond.Signal()
		}
		drained := len(q.pending) == 0 && len(q.active) == 0
		q.mu.Unlock()
		if drained && q.idle != nil {
			q.idle()
		}
	}
}

// next waits for a key that has an item and no worker.
func (q *Queue[K, V]) next() (K, V, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.closed {
			var k K
			var v V
			return k, v, false
		}
		for len(q.order) > 0 {
			k := q.order[0]
			q.order = q.order[1:]
			v, ok := q.pending[k]
			if !ok || q.active[k] {
				// Removed, or queued again when its worker finishes.
				continue
			}
			delete(q.pending, k)
			q.active[k] = true
			return k, v, true
		}
		q.cond.Wait()
	}
}
