package kube

import (
	"context"
	"sync"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

func TestQueueBatchesWhatArrivedMeanwhile(t *testing.T) {
	q := newBatchQueue(3)
	ev := func(name string) model.Event {
		return model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindService, Namespace: "ns", Name: name}}
	}
	q.push(ev("a"), ev("b"), ev("c"), ev("d"))
	q.push(ev("e"))

	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		batches [][]string
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.run(ctx, func(b []model.Event) {
			var names []string
			for _, e := range b {
				names = append(names, e.Key.Name)
			}
			mu.Lock()
			batches = append(batches, names)
			mu.Unlock()
		})
	}()
	eventually(t, "all events are applied", func() bool { return q.appliedCount() == 5 })
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	// Five events, at most three per batch, in order.
	if len(batches) != 2 || len(batches[0]) != 3 || batches[0][0] != "a" || batches[1][1] != "e" {
		t.Errorf("batches = %v, want [[a b c] [d e]]", batches)
	}
}
