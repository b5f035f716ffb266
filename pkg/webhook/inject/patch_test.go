package inject

import (
	"encoding/json"
	"errors"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

func TestCreatePatch(t *testing.T) {
	cases := map[string]struct {
		orig, injected string
		wantErr        bool
	}{
		"adds members, escaping / and ~ in names": {
			orig:     `{"metadata":{"annotations":{"a":"1"}}}`,
			injected: `{"metadata":{"annotations":{"a":"1","sidecar.istio.io/status":"x","t~x":"y"}}}`,
		},
		"inserts list elements before, between and after the user's": {
			orig:     `{"l":[{"name":"a"},{"name":"b"}]}`,
			injected: `{"l":[{"name":"x"},{"name":"a"},{"name":"y"},{"name":"b"},{"name":"z"}]}`,
		},
		"adds inside a matched element after inserting around it": {
			orig:     `{"c":[{"name":"a","env":[{"name":"E"}]}]}`,
			injected: `{"c":[{"name":"p"},{"name":"a","env":[{"name":"E"},{"name":"F"}],"image":"i"}]}`,
		},
		"adds a list that was absent": {
			orig:     `{"spec":{}}`,
			injected: `{"spec":{"initContainers":[{"name":"istio-init"}]}}`,
		},
		"fills the gateway image placeholder": {
			orig:     `{"c":[{"name":"istio-proxy","image":"auto"}]}`,
			injected: `{"c":[{"name":"istio-proxy","image":"proxyv2:1"}]}`,
		},
		"refuses to change a scalar": {
			orig: `{"a":"1"}`, injected: `{"a":"2"}`, wantErr: true,
		},
		"refuses to remove a member": {
			orig: `{"a":"1","b":"2"}`, injected: `{"a":"1"}`, wantErr: true,
		},
		"refuses to reorder the user's list elements": {
			orig: `{"l":[{"name":"a"},{"name":"b"}]}`, injected: `{"l":[{"name":"b"},{"name":"a"}]}`, wantErr: true,
		},
		"refuses to change an image that is not the placeholder": {
			orig: `{"c":[{"name":"x","image":"mine"}]}`, injected: `{"c":[{"name":"x","image":"other"}]}`, wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ops, err := CreatePatch([]byte(tc.orig), []byte(tc.injected))
			if tc.wantErr {
				var ce *ChangeError
				if !errors.As(err, &ce) {
					t.Fatalf("err = %v, want a *ChangeError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			assertPatchApplies(t, []byte(tc.orig), []byte(tc.injected), ops)
		})
	}
}

func assertPatchApplies(t *testing.T, orig, injected []byte, ops []PatchOp) {
	t.Helper()
	raw, _ := json.Marshal(ops)
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Apply(orig)
	if err != nil {
		t.Fatalf("apply %s: %v", raw, err)
	}
	if !jsonpatch.Equal(got, injected) {
		t.Fatalf("patched = %s, want %s (patch %s)", got, injected, raw)
	}
}

// FuzzCreatePatch checks, for any pair of JSON documents, that a patch
// without error reproduces the second from the first.
func FuzzCreatePatch(f *testing.F) {
	f.Add(`{"a":[{"name":"x"}]}`, `{"a":[{"name":"y"},{"name":"x","b":1}]}`)
	f.Add(`{"m":{"k/1":"v"}}`, `{"m":{"k/1":"v","k~2":[1,2]}}`)
	f.Add(`{"l":[1,2,3]}`, `{"l":[0,1,2,2,3,4]}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		if !json.Valid([]byte(a)) || !json.Valid([]byte(b)) {
			return
		}
		ops, err := CreatePatch([]byte(a), []byte(b))
		if err != nil {
			return
		}
		assertPatchApplies(t, []byte(a), []byte(b), ops)
	})
}
