// Package config defines what a configuration source is. Its subpackages
// are the sources: kube (a Kubernetes API server, through informers) and
// file (a directory of YAML). Both emit the same model.Events.
package config

import (
	"context"

	"github.com/meshplane/discovery/pkg/model"
)

// Sink receives a source's events. *model.Store is the Sink in production.
type Sink interface {
	// Apply applies events in order; see model.Store.Apply.
	Apply(events ...model.Event) (*model.Update, error)
}

var _ Sink = (*model.Store)(nil)

// Source reads configuration from somewhere and reports it to a Sink.
type Source interface {
	// Name identifies the source in logs, metrics and /ready.
	Name() string
	// Start reports the current state to sink, then every change, until
	// ctx ends. It returns nil when ctx ends, or an error if the source
	// cannot run at all.
	Start(ctx context.Context, sink Sink) error
	// HasSynced reports whether the source has handed its initial state to
	// the sink: until then the World is incomplete and the server not ready.
	HasSynced() bool
}
