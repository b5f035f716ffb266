package model

import "k8s.io/apimachinery/pkg/runtime"

// isKind reports whether obj is of the given kind and API group, judged by
// its Go type's registered scheme (its TypeMeta may be empty, as informers
// leave it).
func isKind(obj runtime.Object, kind, group string) bool {
	gvks, _, err := istioScheme.ObjectKinds(obj)
	if err != nil {
		return false
	}
	for _, gvk := range gvks {
		if gvk.Kind == kind && gvk.Group == group && gvk.Version == "v1" {
			return true
		}
	}
	return false
}
