package kube

import (
	"context"
	"sync"

	"github.com/meshplane/discovery/pkg/model"
)

// batchQueue collects the events every informer handler hands over and
// gives them to the Sink in batches: everything queued while the previous
// Apply ran goes into the next one. Informer handlers never block on the
// Sink, and a burst (the initial list, a relist after an outage) becomes a
// few Worlds instead of one per object. Events of one kind keep their order
// because each kind's handler pushes them in order.
type batchQueue struct {
	mu       sync.Mutex
	events   []model.Event
	pushed   uint64 // events ever pushed
	applied  uint64 // events ever handed to the Sink
	wake     chan struct{}
	maxBatch int
}

func newBatchQueue(maxBatch int) *batchQueue {
	return &batchQueue{wake: make(chan struct{}, 1), maxBatch: maxBatch}
}

// push queues events and returns how many events were ever pushed.
func (q *batchQueue) push(events ...model.Event) uint64 {
	if len(events) == 0 {
		return q.pushedCount()
	}
	q.mu.Lock()
	q.events = append(q.events, events...)
	q.pushed += uint64(len(events))
	n := q.pushed
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return n
}

func (q *batchQueue) pushedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pushed
}

func (q *batchQueue) appliedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.applied
}

// take removes up to maxBatch queued events.
func (q *batchQueue) take() []model.Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.events), q.maxBatch)
	if n == 0 {
		return nil
	}
	batch := q.events[:n:n]
	if n == len(q.events) {
		q.events = nil
	} else {
		q.events = q.events[n:]
	}
	return batch
}

func (q *batchQueue) done(n int) {
	q.mu.Lock()
	q.applied += uint64(n)
	q.mu.Unlock()
}

// run hands batches to apply until ctx ends. Events still queued then are
// dropped: the process is shutting down.
func (q *batchQueue) run(ctx context.Context, apply func([]model.Event)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		for batch := q.take(); batch != nil; batch = q.take() {
			apply(batch)
			q.done(len(batch))
			if ctx.Err() != nil {
				return
			}
		}
	}
}
