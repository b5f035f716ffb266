package status

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	gw "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// A policy's status.ancestors (BackendTLSPolicy), merged as istiod's
// mergeAncestors does: entries of another controller stay where they
// are; entries of Istio's controllers (istio.io/gateway-controller and
// istio.io/mesh-controller) are replaced by the Report's of the same
// ancestorRef, or dropped when it no longer names them; the Report's
// new ones follow; at most 16 in all.

func ourAncestorController(c any) bool {
	return c == gatewayapi.ControllerName || c == gatewayapi.MeshControllerName
}

// mergePolicyStatus puts rep's ancestors into next (a copy of cur).
func mergePolicyStatus(cur, next map[string]any, rep *gatewayapi.Report, now time.Time) (map[string]any, bool, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&struct {
		Ancestors []gw.PolicyAncestorStatus `json:"ancestors"`
	}{rep.Ancestors})
	if err != nil {
		return nil, false, fmt.Errorf("policy status: %w", err)
	}
	next["ancestors"] = mergeAncestors(list(next["ancestors"]), list(m["ancestors"]), now)
	return next, !sameJSON(orEmpty(cur), next), nil
}

func mergeAncestors(cur, want []any, now time.Time) []any {
	wantBy := map[string]map[string]any{}
	var order []string
	for _, x := range want {
		w := x.(map[string]any)
		k := ancestorKey(w["ancestorRef"])
		if _, dup := wantBy[k]; !dup {
			order = append(order, k)
		}
		wantBy[k] = w
	}
	out := make([]any, 0, len(cur)+len(want))
	used := map[string]bool{}
	for _, x := range cur {
		m, ok := x.(map[string]any)
		if !ok || !ourAncestorController(m["controllerName"]) {
			out = append(out, x)
			continue
		}
		k := ancestorKey(m["ancestorRef"])
		w := wantBy[k]
		if w == nil || used[k] {
			continue
		}
		used[k] = true
		w["ancestorRef"] = m["ancestorRef"] // as the API server stored it
		w["conditions"] = mergeConditions(list(m["conditions"]), list(w["conditions"]), now)
		out = append(out, w)
	}
	for _, k := range order {
		if used[k] {
			continue
		}
		w := wantBy[k]
		w["conditions"] = mergeConditions(nil, list(w["conditions"]), now)
		out = append(out, w)
	}
	return out[:min(len(out), 16)]
}

// ancestorKey names an ancestorRef: group and kind as written (a Service
// ancestor's group is ""), namespace, name, sectionName, port.
func ancestorKey(x any) string {
	m, _ := x.(map[string]any)
	get := func(k string) string {
		if v, ok := m[k]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	group := get("group")
	if _, ok := m["group"]; !ok {
		group = gw.GroupName
	}
	kind := get("kind")
	if kind == "" {
		kind = "Gateway"
	}
	return group + "/" + kind + "/" + get("namespace") + "/" + get("name") + "/" + get("sectionName") + "/" + get("port")
}
