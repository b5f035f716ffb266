package model

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// isKind reports whether obj is of the given kind, API group and version,
// judged by its Go type's registered scheme (its TypeMeta may be empty, as
// informers leave it).
func isKind(obj runtime.Object, want schema.GroupVersionKind) bool {
	gvks, _, err := istioScheme.ObjectKinds(obj)
	if err != nil {
		return false
	}
	for _, gvk := range gvks {
		if gvk == want {
			return true
		}
	}
	return false
}
