package model

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshplane/discovery/pkg/mesh"
)

// MeshObject carries a MeshConfig, parsed and checked, in an Event of
// KindMeshConfig. The Config is immutable, so copies share it.
type MeshObject struct {
	Config *mesh.Config
	// Source says where it was read (a ConfigMap and its
	// resourceVersion, a file, "defaults").
	Source string
}

var _ runtime.Object = (*MeshObject)(nil)

// GetObjectKind is empty: a MeshObject is never serialized.
func (*MeshObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject shares the immutable Config.
func (o *MeshObject) DeepCopyObject() runtime.Object { c := *o; return &c }

// Mesh is the MeshConfig in force; Istio's defaults until one is read.
func (w *World) Mesh() *mesh.Config {
	if w.mesh == nil {
		return mesh.Default()
	}
	return w.mesh.Config
}

// MeshSource says where the MeshConfig in force was read.
func (w *World) MeshSource() string {
	if w.mesh == nil {
		return "defaults"
	}
	return w.mesh.Source
}

// meshConfig applies a KindMeshConfig event: a MeshConfig of other
// content than the one in force replaces it; a delete brings back Istio's
// defaults.
func (b *builder) meshConfig(ev Event) error {
	if ev.Key != MeshKey {
		return fmt.Errorf("the MeshConfig is named %s", MeshKey)
	}
	old := b.w.Mesh()
	if ev.Op == OpDelete {
		if b.w.mesh == nil {
			return nil
		}
		b.w.mesh = nil
		if old.Hash() != mesh.Default().Hash() {
			b.changed(ev.Key, OpDelete)
		}
		return nil // nothing changed: the World is not published
	}
	o, ok := ev.Object.(*MeshObject)
	if !ok || o.Config == nil {
		return fmt.Errorf("%w: %T", ErrWrongType, ev.Object)
	}
	if o.Config.Hash() == old.Hash() {
		// Same content (a resync, an edit of a comment): nothing to push.
		return nil
	}
	b.w.mesh = o
	b.changed(ev.Key, OpUpsert)
	return nil
}
