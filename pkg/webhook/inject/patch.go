package inject

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// PatchOp is one RFC 6902 JSON patch operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// ChangeError reports that the injected object is not the original plus
// additions: something the user wrote would be changed or removed.
type ChangeError struct {
	Path   string
	Reason string
}

func (e *ChangeError) Error() string {
	return fmt.Sprintf("injection would change what the pod sets at %s: %s", e.Path, e.Reason)
}

// CreatePatch returns the JSON patch that turns original into injected,
// both JSON objects, using only "add" operations (and "replace" for the
// gateway image placeholder "auto", which Istio defines as the injector's
// to fill). It returns a *ChangeError when injected is not original plus
// additions. Lists are matched in order: elements that are objects with a
// "name" are matched by name (and patched inside), others by equality.
func CreatePatch(original, injected []byte) ([]PatchOp, error) {
	var a, b any
	if err := json.Unmarshal(original, &a); err != nil {
		return nil, fmt.Errorf("original object: %w", err)
	}
	if err := json.Unmarshal(injected, &b); err != nil {
		return nil, fmt.Errorf("injected object: %w", err)
	}
	if _, ok := a.(map[string]any); !ok {
		return nil, errors.New("original object: not a JSON object")
	}
	if _, ok := b.(map[string]any); !ok {
		return nil, errors.New("injected object: not a JSON object")
	}
	ops := []PatchOp{}
	if err := diff("", a, b, &ops); err != nil {
		return nil, err
	}
	return ops, nil
}

func diff(path string, a, b any, ops *[]PatchOp) error {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return &ChangeError{Path: pathOrRoot(path), Reason: "an object would become something else"}
		}
		return diffObject(path, av, bv, ops)
	case []any:
		bv, ok := b.([]any)
		if !ok {
			return &ChangeError{Path: pathOrRoot(path), Reason: "a list would become something else"}
		}
		return diffList(path, av, bv, ops)
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	if a == imagePlaceholder && strings.HasSuffix(path, "/image") {
		*ops = append(*ops, PatchOp{Op: "replace", Path: path, Value: b})
		return nil
	}
	return &ChangeError{Path: pathOrRoot(path), Reason: fmt.Sprintf("%v would become %v", a, b)}
}

func diffObject(path string, a, b map[string]any, ops *[]PatchOp) error {
	for k := range a {
		if _, ok := b[k]; !ok {
			return &ChangeError{Path: path + "/" + escape(k), Reason: "it would be removed"}
		}
	}
	keys := make([]string, 0, len(b))
	for k := range b {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := path + "/" + escape(k)
		av, ok := a[k]
		if !ok {
			*ops = append(*ops, PatchOp{Op: "add", Path: p, Value: b[k]})
			continue
		}
		if err := diff(p, av, b[k], ops); err != nil {
			return err
		}
	}
	return nil
}

// diffList matches a's elements, in order, to a subsequence of b's; the
// rest of b is inserted. Insertions go first, in ascending index, so the
// list has its final shape before matched elements are patched inside.
func diffList(path string, a, b []any, ops *[]PatchOp) error {
	match := make([]int, len(a)) // a[i] matches b[match[i]]
	j := 0
	for i, ae := range a {
		for j < len(b) && !sameElement(ae, b[j]) {
			j++
		}
		if j == len(b) {
			return &ChangeError{Path: path + "/" + strconv.Itoa(i), Reason: "a list element would be removed or moved"}
		}
		match[i] = j
		j++
	}
	matched := make([]bool, len(b))
	for _, m := range match {
		matched[m] = true
	}
	for k, be := range b {
		if !matched[k] {
			*ops = append(*ops, PatchOp{Op: "add", Path: path + "/" + strconv.Itoa(k), Value: be})
		}
	}
	for i, m := range match {
		if err := diff(path+"/"+strconv.Itoa(m), a[i], b[m], ops); err != nil {
			return err
		}
	}
	return nil
}

// sameElement matches list elements: objects by "name" when both have
// one, everything else by equality.
func sameElement(a, b any) bool {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		an, ahas := am["name"]
		bn, bhas := bm["name"]
		if ahas && bhas {
			return reflect.DeepEqual(an, bn)
		}
	}
	return reflect.DeepEqual(a, b)
}

// escape encodes a member name as an RFC 6901 JSON pointer token.
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func pathOrRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}
