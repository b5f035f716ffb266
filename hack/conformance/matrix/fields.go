package matrix

import (
	"sort"
	"strings"

	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// userKeyed are the spec fields whose keys are the user's names (labels,
// header names, ports): their children are one feature, not one each.
var userKeyed = map[string]bool{
	"labels": true, "matchLabels": true, "sourceLabels": true, "queryParams": true, "withoutHeaders": true,
	"set": true, "add": true, "selector": true, "portLevelMtls": true, "metadata": true,
}

// maxDepth bounds a feature's field path (http.match.uri.prefix).
const maxDepth = 4

// Fields lists the field paths an Istio object sets, list indexes
// dropped: "http.match.headers", "trafficPolicy.tls.mode". Each is a
// feature of the report.
func Fields(o *scenario.Object) []string {
	set := map[string]bool{}
	walk(o.Spec(), "", 0, "", set)
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func walk(v any, path string, depth int, parent string, set map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		if userKeyed[parent] || (parent == "headers" && strings.HasSuffix(path, "match.headers")) || depth >= maxDepth {
			set[path] = true
			return
		}
		if len(x) == 0 && path != "" {
			set[path] = true
		}
		for k, c := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			walk(c, p, depth+1, k, set)
		}
	case []any:
		if len(x) == 0 {
			set[path] = true
		}
		for _, c := range x {
			walk(c, path, depth, parent, set)
		}
	default:
		if path != "" {
			set[path] = true
		}
	}
}
