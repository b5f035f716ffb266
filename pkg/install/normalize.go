package install

import (
	"fmt"
	"strconv"
)

// normalize folds the IstioOperator's top-level and component settings
// into spec.values, as istioctl does before rendering, so that the charts
// (and the checks) read one place:
//
//	hub, tag                     values.global.hub, values.global.tag
//	revision                     values.revision ("default" is "": the default revision)
//	namespace                    values.global.istioNamespace
//	meshConfig                   laid over values.meshConfig
//	components.pilot.hub, .tag   values.pilot.hub, values.pilot.tag
//	components.pilot.enabled     values.pilot.enabled
//
// The namespace is, in this order, the first set by the user of
// namespace, components.pilot.namespace, values.global.istioNamespace and
// a file's metadata.namespace. A setting hidden by another is warned
// about. Numeric tags become the text they were written as.
func normalize(l *Loaded, inputs []userInput) error {
	t := l.Tree
	values := subMap(t, "values")
	global := subMap(values, "global")
	pilot := subMap(values, "pilot")
	comps := subMap(t, "components")
	pc := subMap(comps, "pilot")

	for _, p := range [][]string{{"tag"}, {"components", "pilot", "tag"}, {"values", "global", "tag"}, {"values", "global", "proxy", "tag"}, {"values", "pilot", "tag"}} {
		stringifyTag(t, p)
	}
	for _, kind := range []string{"ingressGateways", "egressGateways"} {
		gws, _ := comps[kind].([]any)
		for _, g := range gws {
			if gm, ok := g.(map[string]any); ok {
				stringifyTag(gm, []string{"tag"})
			}
		}
	}

	fold := func(from, to string, src, dst map[string]any, fromKey, toKey string) {
		v, ok := src[fromKey]
		if !ok || v == nil || v == "" {
			return
		}
		if old, ok := dst[toKey]; ok && old != nil && old != "" && fmt.Sprint(old) != fmt.Sprint(v) && setByUser(inputs, to) {
			l.Warnings = append(l.Warnings, fmt.Sprintf("%s: %v is overridden by %s: %v", to, old, from, v))
		}
		dst[toKey] = v
	}
	fold("hub", "values.global.hub", t, global, "hub", "hub")
	fold("tag", "values.global.tag", t, global, "tag", "tag")
	fold("revision", "values.revision", t, values, "revision", "revision")
	fold("components.pilot.hub", "values.pilot.hub", pc, pilot, "hub", "hub")
	fold("components.pilot.tag", "values.pilot.tag", pc, pilot, "tag", "tag")
	if mc, ok := t["meshConfig"].(map[string]any); ok {
		values["meshConfig"] = merge(values["meshConfig"], mc)
	}
	enabled := true
	if e, ok := pc["enabled"].(bool); ok {
		enabled = e
	}
	pilot["enabled"] = enabled

	if rev, _ := values["revision"].(string); rev == defaultRevision {
		// The default revision is the one without a name: "default" is
		// what its labels say, and a second set of objects named
		// *-default would select the same pods.
		values["revision"] = ""
	}
	ns, hidden := namespaceOf(inputs)
	for _, h := range hidden {
		l.Warnings = append(l.Warnings, h)
	}
	global["istioNamespace"] = ns
	t["namespace"] = ns
	rev, _ := values["revision"].(string)
	t["revision"] = rev
	delete(t, "hub")
	delete(t, "tag")
	delete(t, "meshConfig")
	delete(pc, "hub")
	delete(pc, "tag")
	return nil
}

// namespaceOf finds the control plane's namespace in the user's input
// (default istio-system) and names the settings it hides.
func namespaceOf(inputs []userInput) (string, []string) {
	type setting struct{ path, value string }
	ranks := []string{"namespace", "components.pilot.namespace", "values.global.istioNamespace", "metadata.namespace"}
	found := map[string]setting{}
	for _, ui := range inputs {
		if ui.namespace != "" {
			found["metadata.namespace"] = setting{ui.source + " metadata.namespace", ui.namespace}
		}
		for _, p := range ranks[:3] {
			if v, ok := lookup(ui.tree, p).(string); ok && v != "" {
				found[p] = setting{p, v}
			}
		}
	}
	ns := "istio-system"
	var winner setting
	for _, r := range ranks {
		if s, ok := found[r]; ok {
			ns, winner = s.value, s
			break
		}
	}
	var hidden []string
	for _, r := range ranks {
		if s, ok := found[r]; ok && s.value != ns && r != "metadata.namespace" {
			hidden = append(hidden, fmt.Sprintf("%s: %s is overridden by %s: %s", s.path, s.value, winner.path, ns))
		}
	}
	return ns, hidden
}

// setByUser reports whether an input sets the dotted path.
func setByUser(inputs []userInput, path string) bool {
	for _, ui := range inputs {
		if v := lookup(ui.tree, path); v != nil {
			return true
		}
	}
	return false
}

// lookup returns the value at a dotted path of field names, or nil.
func lookup(tree map[string]any, path string) any {
	p, err := ParsePath(path)
	if err != nil {
		return nil
	}
	v, _ := valueIn(tree, p)
	return v
}

// valueIn walks p (field names, indexes and selectors) through a tree.
func valueIn(v any, p Path) (any, bool) {
	for _, st := range p {
		if st.IsKey() {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[st.Key]; !ok {
				return nil, false
			}
			continue
		}
		l, ok := v.([]any)
		if !ok {
			return nil, false
		}
		i := st.Index
		if i < 0 {
			i = selectElement(l, st)
		}
		if i < 0 || i >= len(l) {
			return nil, false
		}
		v = l[i]
	}
	return v, true
}

// subMap returns m[k] as an object, creating it if needed.
func subMap(m map[string]any, k string) map[string]any {
	if s, ok := m[k].(map[string]any); ok {
		return s
	}
	s := map[string]any{}
	m[k] = s
	return s
}

// stringifyTag turns a number at path into the text it was written as.
func stringifyTag(m map[string]any, path []string) {
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			return
		}
		m = next
	}
	k := path[len(path)-1]
	if f, ok := m[k].(float64); ok {
		m[k] = strconv.FormatFloat(f, 'f', -1, 64)
	}
}
