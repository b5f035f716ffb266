package file

import (
	"bytes"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzParse checks that the parser never panics, that every error names
// a document of the input, and that every object it returns is keyed.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		good,
		good + badDoc,
		service("reviews", 9080) + "---\n" + virtualService("reviews", "v1"),
		"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n- 7\n",
		"--- {a: b}\n---\n# c\n~\n",
		"apiVersion: security.istio.io/v1beta1\nkind: AuthorizationPolicy\nmetadata: {name: a}\nspec: {action: DENY}\n",
		`{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "a"}, "addressType": "IPv4"}`,
		"a: &a [*a]\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, errs := Parse("f.yaml", data)
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, e := range errs {
			if e.File != "f.yaml" || e.Doc < 0 || e.Line < 1 || e.Line > lines || e.Item < -1 || e.Err == nil {
				t.Fatalf("error names no document of the input: %+v", e)
			}
			_ = e.Error()
		}
		for _, o := range objs {
			if o.Key.Name == "" || o.Key.Namespace == "" && o.Key.Kind.Namespaced() || o.Object == nil {
				t.Fatalf("object without a proper key: %+v", o)
			}
			if o.Doc < 0 || o.Line < 1 || o.Line > lines {
				t.Fatalf("object names no document of the input: %+v", o)
			}
			if rv := o.Object.(metav1.Object).GetResourceVersion(); rv != o.Hash {
				t.Fatalf("resourceVersion %q, hash %q", rv, o.Hash)
			}
		}
	})
}
