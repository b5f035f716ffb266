package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// components.*.k8s is laid over a component's rendered objects as
// istioctl lays it: each setting is a strategic merge patch of one object
// (the Deployment and its container, the Services, the autoscaler, the
// budget), then the overlays patch objects by path. A setting whose
// object is not rendered is warned about, an overlay that finds nothing
// is refused, and every patched object must still be a valid object of
// its kind.

// patchTargets name a component's objects.
type patchTargets struct {
	deployment, container string
	services              []string
	scaling               string // HorizontalPodAutoscaler and PodDisruptionBudget
}

// k8sPatch is where one components.*.k8s setting goes.
type k8sPatch struct {
	kind        string
	services    bool   // every Service of the component, not the Deployment's name
	scaling     bool   // the autoscaler's or budget's name
	format      string // the patch, %s the setting (%%s with the container)
	inContainer bool
}

var k8sPatches = map[string]k8sPatch{
	"affinity":            {kind: "Deployment", format: `{"spec":{"template":{"spec":{"affinity":%s}}}}`},
	"env":                 {kind: "Deployment", inContainer: true, format: `{"spec":{"template":{"spec":{"containers":[{"name":%q,"env":%%s}]}}}}`},
	"hpaSpec":             {kind: "HorizontalPodAutoscaler", scaling: true, format: `{"spec":%s}`},
	"imagePullPolicy":     {kind: "Deployment", inContainer: true, format: `{"spec":{"template":{"spec":{"containers":[{"name":%q,"imagePullPolicy":%%s}]}}}}`},
	"nodeSelector":        {kind: "Deployment", format: `{"spec":{"template":{"spec":{"nodeSelector":%s}}}}`},
	"podDisruptionBudget": {kind: "PodDisruptionBudget", scaling: true, format: `{"spec":%s}`},
	"podAnnotations":      {kind: "Deployment", format: `{"spec":{"template":{"metadata":{"annotations":%s}}}}`},
	"priorityClassName":   {kind: "Deployment", format: `{"spec":{"template":{"spec":{"priorityClassName":%s}}}}`},
	"readinessProbe":      {kind: "Deployment", inContainer: true, format: `{"spec":{"template":{"spec":{"containers":[{"name":%q,"readinessProbe":%%s}]}}}}`},
	"replicaCount":        {kind: "Deployment", format: `{"spec":{"replicas":%s}}`},
	"resources":           {kind: "Deployment", inContainer: true, format: `{"spec":{"template":{"spec":{"containers":[{"name":%q,"resources":%%s}]}}}}`},
	"strategy":            {kind: "Deployment", format: `{"spec":{"strategy":%s}}`},
	"tolerations":         {kind: "Deployment", format: `{"spec":{"template":{"spec":{"tolerations":%s}}}}`},
	"serviceAnnotations":  {kind: "Service", services: true, format: `{"metadata":{"annotations":%s}}`},
	"service":             {kind: "Service", services: true, format: `{"spec":%s}`},
	"securityContext":     {kind: "Deployment", format: `{"spec":{"template":{"spec":{"securityContext":%s}}}}`},
	"volumes":             {kind: "Deployment", format: `{"spec":{"template":{"spec":{"volumes":%s}}}}`},
	"volumeMounts":        {kind: "Deployment", inContainer: true, format: `{"spec":{"template":{"spec":{"containers":[{"name":%q,"volumeMounts":%%s}]}}}}`},
}

// applyK8s lays k8s (components.<name>.k8s as written, at path) over
// objs and returns the warnings for settings that found no object.
func applyK8s(objs []*unstructured.Unstructured, j chartJob, path string) ([]string, error) {
	if len(j.k8s) == 0 {
		return nil, nil
	}
	var warnings []string
	patched := map[*unstructured.Unstructured]bool{}
	for _, field := range sortedKeys(j.k8s) {
		if field == "overlays" || j.k8s[field] == nil {
			continue
		}
		pt, ok := k8sPatches[field]
		if !ok {
			continue
		}
		v := j.k8s[field]
		if field == "service" && j.chart == "gateway" {
			// The gateway chart took the ports as values; strategic merge
			// of Service ports is broken upstream (kubernetes#103544).
			svc, _ := deepCopy(v).(map[string]any)
			delete(svc, "ports")
			v = svc
		}
		inner, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		format := pt.format
		if pt.inContainer {
			format = fmt.Sprintf(format, j.targets.container)
		}
		patch := fmt.Sprintf(format, inner)
		names := []string{j.targets.deployment}
		switch {
		case pt.services:
			names = j.targets.services
		case pt.scaling:
			names = []string{j.targets.scaling}
		}
		found := false
		for _, o := range objs {
			if o.GetKind() != pt.kind || !contains(names, o.GetName()) {
				continue
			}
			found = true
			if err := strategicPatch(o, []byte(patch)); err != nil {
				return nil, fmt.Errorf("%s.%s: %w", path, field, err)
			}
			patched[o] = true
		}
		if !found && j.chart != "base" {
			warnings = append(warnings, fmt.Sprintf("%s.%s: accepted, but has no effect in discovery (no %s %s is rendered)", path, field, pt.kind, strings.Join(names, ", ")))
		}
	}
	overlays, _ := j.k8s["overlays"].([]any)
	for i, ov := range overlays {
		o, err := applyOverlay(objs, ov, fmt.Sprintf("%s.overlays[%d]", path, i))
		if err != nil {
			return nil, err
		}
		patched[o] = true
	}
	for o := range patched {
		if err := checkObject(o); err != nil {
			return nil, fmt.Errorf("%s: the patched %s %s is not valid: %w", path, o.GetKind(), o.GetName(), err)
		}
	}
	return warnings, nil
}

// strategicPatch applies a strategic merge patch to o in place, with the
// merge keys of o's Go type; a PodDisruptionBudget keeps only one of
// minAvailable and maxUnavailable (the patch's).
func strategicPatch(o *unstructured.Unstructured, patch []byte) error {
	typed, err := scheme.Scheme.New(o.GroupVersionKind())
	if err != nil {
		return err
	}
	base, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	out, err := strategicpatch.StrategicMergePatch(base, patch, typed)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		return err
	}
	if o.GetKind() == "PodDisruptionBudget" {
		var p struct {
			Spec map[string]any `json:"spec"`
		}
		_ = json.Unmarshal(patch, &p)
		spec, _ := m["spec"].(map[string]any)
		if _, ok := p.Spec["maxUnavailable"]; ok {
			delete(spec, "minAvailable")
		} else if _, ok := p.Spec["minAvailable"]; ok {
			delete(spec, "maxUnavailable")
		}
	}
	o.Object = m
	return nil
}

// applyOverlay applies one overlay (kind, name, patches) and returns the
// object it patched.
func applyOverlay(objs []*unstructured.Unstructured, raw any, path string) (*unstructured.Unstructured, error) {
	m, _ := raw.(map[string]any)
	kind, _ := m["kind"].(string)
	name, _ := m["name"].(string)
	var target *unstructured.Unstructured
	var have []string
	for _, o := range objs {
		if o.GetKind() != kind {
			continue
		}
		if o.GetName() == name {
			target = o
		}
		have = append(have, o.GetName())
	}
	if target == nil {
		sort.Strings(have)
		if len(have) == 0 {
			have = []string{"none"}
		}
		return nil, fmt.Errorf("%s: no %s %s is rendered (the component's %ss: %s)", path, kind, name, kind, strings.Join(have, ", "))
	}
	patches, _ := m["patches"].([]any)
	for i, pr := range patches {
		pm, _ := pr.(map[string]any)
		ps, _ := pm["path"].(string)
		p, err := ParsePath(ps)
		if err != nil {
			return nil, fmt.Errorf("%s.patches[%d]: %w", path, i, err)
		}
		out, err := overlayAt(target.Object, p, pm["value"])
		if err != nil {
			return nil, fmt.Errorf("%s.patches[%d] (%s %s): %s: %w", path, i, kind, name, ps, err)
		}
		target.Object = out.(map[string]any)
	}
	return target, nil
}

// overlayAt sets (value nil: removes) the node at p. Missing objects and
// lists on the way are created; [k:v] and [:v] select an element, or, as
// the last step, add the value when none is selected; [N] past the end
// adds.
func overlayAt(node any, p Path, value any) (any, error) {
	if len(p) == 0 {
		return overlayValue(node, value), nil
	}
	st := p[0]
	if st.IsKey() {
		m, ok := node.(map[string]any)
		if node != nil && !ok {
			return nil, fmt.Errorf("%s: not an object", st)
		}
		if m == nil {
			m = map[string]any{}
		}
		if len(p) == 1 && value == nil {
			if _, ok := m[st.Key]; !ok {
				return nil, fmt.Errorf("%s: nothing to remove", st)
			}
			delete(m, st.Key)
			return m, nil
		}
		child, err := overlayAt(m[st.Key], p[1:], value)
		if err != nil {
			return nil, err
		}
		m[st.Key] = child
		return m, nil
	}
	l, ok := node.([]any)
	if node != nil && !ok {
		return nil, fmt.Errorf("%s: not a list", st)
	}
	i := st.Index
	if i < 0 {
		i = selectElement(l, st)
		if i < 0 {
			if len(p) > 1 || value == nil {
				return nil, fmt.Errorf("%s selects no element (%s)", st, describeElements(l, st))
			}
			i = len(l)
		}
	}
	if i >= len(l) {
		if value == nil {
			return nil, fmt.Errorf("%s: the list has %d elements", st, len(l))
		}
		l = append(l, nil)
		i = len(l) - 1
	}
	if len(p) == 1 && value == nil {
		return append(l[:i], l[i+1:]...), nil
	}
	child, err := overlayAt(l[i], p[1:], value)
	if err != nil {
		return nil, err
	}
	l[i] = child
	return l, nil
}

// overlayValue is an overlay's value as it replaces old: a string holding
// a YAML object or list is read as one where an object or list goes (or
// nothing was), as istioctl reads it.
func overlayValue(old, value any) any {
	s, ok := value.(string)
	if !ok {
		return value
	}
	switch old.(type) {
	case nil, map[string]any, []any:
		var v any
		if err := yaml.Unmarshal([]byte(s), &v); err == nil {
			switch v.(type) {
			case map[string]any, []any:
				return v
			}
		}
	}
	return value
}

var strictCodec = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// checkObject decodes o strictly as its kind's Go type.
func checkObject(o *unstructured.Unstructured) error {
	b, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	if _, _, err := strictCodec.Decode(b, nil, nil); err != nil && !runtime.IsNotRegisteredError(err) {
		if se, ok := runtime.AsStrictDecodingError(err); ok {
			return errors.Join(se.Errors()...)
		}
		return err
	}
	return nil
}
