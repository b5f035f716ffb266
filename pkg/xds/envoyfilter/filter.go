package envoyfilter

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// Filter is one EnvoyFilter compiled for generation: its patch values
// decoded once and its proxy version matches compiled.
type Filter struct {
	Namespace, Name string
	// ResourceVersion is the object's version: ClassKey names it, so that
	// an edit moves the proxies it selects to a new class.
	ResourceVersion string
	// Generation is the object's metadata.generation (0 in file mode):
	// unlike ResourceVersion, a status write leaves it alone, so what is
	// reported on the object's status is keyed by it.
	Generation int64
	Priority   int32
	Created    time.Time
	// Selector is spec.workloadSelector.labels; nil when there is no
	// selector (every workload of the namespace, or of the mesh for the
	// root namespace).
	Selector   map[string]string
	TargetRefs []*typev1beta1.PolicyTargetReference
	// Patches are the patches generation applies, in spec order.
	Patches []*Patch
	// Problems say which patches are not applied and why (undecodable
	// value, an applyTo or context discovery does not implement).
	Problems []string
}

// Key is namespace/name.
func (f *Filter) Key() string { return f.Namespace + "/" + f.Name }

// Patch is one configPatch.
type Patch struct {
	Owner *Filter
	// Index is the patch's position in spec.configPatches.
	Index     int
	ApplyTo   networking.EnvoyFilter_ApplyTo
	Operation networking.EnvoyFilter_Patch_Operation
	// Match is never nil: a patch without one matches everything (ANY).
	Match *networking.EnvoyFilter_EnvoyConfigObjectMatch
	// Value is the decoded patch value (nil for REMOVE without one).
	Value proto.Message

	versionPrefix  string
	versionRegex   *regexp.Regexp
	versionNoMatch bool
}

// hasProxyMatch reports whether the patch depends on the proxy's version
// or metadata.
func (p *Patch) hasProxyMatch() bool { return p.Match.GetProxy() != nil }

// maxProxyVersionLen is istiod's bound on a proxyVersion expression: a
// longer one matches no proxy (fail closed) and is not compiled.
const maxProxyVersionLen = 1024

// wellKnownVersions are the expressions istiod turns into prefix matches
// (an optimisation with the same result).
var wellKnownVersions = map[string]string{
	`^1\.16.*`: "1.16", `^1\.17.*`: "1.17", `^1\.18.*`: "1.18", `^1\.19.*`: "1.19",
	`^1\.20.*`: "1.20", `^1\.21.*`: "1.21", `^1\.22.*`: "1.22", `^1\.23.*`: "1.23",
}

// Compile decodes spec's patches as istiod's convertToEnvoyFilterWrapper:
// a patch without patch or with a value that does not decode (leniently)
// is skipped; INSERT_BEFORE/AFTER/FIRST mean ADD except for HTTP_FILTER,
// NETWORK_FILTER, HTTP_ROUTE and LISTENER_FILTER. Patches discovery does
// not apply (EXTENSION_CONFIG, BOOTSTRAP, the WAYPOINT context) are left
// out and named in Problems, never silently dropped.
func Compile(namespace, name, resourceVersion string, created time.Time, spec *networking.EnvoyFilter) *Filter {
	f := &Filter{
		Namespace: namespace, Name: name, ResourceVersion: resourceVersion,
		Priority: spec.GetPriority(), Created: created, TargetRefs: spec.GetTargetRefs(),
	}
	if ws := spec.GetWorkloadSelector(); ws != nil {
		f.Selector = ws.GetLabels()
		if f.Selector == nil {
			f.Selector = map[string]string{}
		}
	}
	for i, cp := range spec.GetConfigPatches() {
		if cp.GetPatch() == nil {
			f.Problems = append(f.Problems, fmt.Sprintf("configPatches[%d]: no patch; skipped", i))
			continue
		}
		if reason := unsupported(cp); reason != "" {
			f.Problems = append(f.Problems, fmt.Sprintf("configPatches[%d]: %s", i, reason))
			continue
		}
		p := &Patch{Owner: f, Index: i, ApplyTo: cp.GetApplyTo(), Operation: cp.GetPatch().GetOperation(), Match: cp.GetMatch()}
		if v := cp.GetPatch().GetValue(); v != nil || p.Operation != networking.EnvoyFilter_Patch_REMOVE {
			val, err := DecodePatch(p.ApplyTo, v, false)
			if err != nil {
				f.Problems = append(f.Problems, fmt.Sprintf("configPatches[%d]: value does not decode, skipped: %v", i, err))
				continue
			}
			p.Value = val
		}
		if p.Match == nil {
			p.Match = &networking.EnvoyFilter_EnvoyConfigObjectMatch{Context: networking.EnvoyFilter_ANY}
		}
		if v := p.Match.GetProxy().GetProxyVersion(); v != "" {
			if prefix, ok := wellKnownVersions[v]; ok {
				p.versionPrefix = prefix
			} else if len(v) > maxProxyVersionLen {
				p.versionNoMatch = true
			} else if re, err := regexp.Compile(v); err == nil {
				p.versionRegex = re
			}
		}
		switch p.Operation {
		case networking.EnvoyFilter_Patch_INSERT_BEFORE, networking.EnvoyFilter_Patch_INSERT_AFTER, networking.EnvoyFilter_Patch_INSERT_FIRST:
			switch p.ApplyTo {
			case networking.EnvoyFilter_HTTP_FILTER, networking.EnvoyFilter_NETWORK_FILTER,
				networking.EnvoyFilter_HTTP_ROUTE, networking.EnvoyFilter_LISTENER_FILTER:
			default:
				p.Operation = networking.EnvoyFilter_Patch_ADD
			}
		}
		f.Patches = append(f.Patches, p)
	}
	return f
}

// unsupported says why discovery does not apply cp, or "".
func unsupported(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) string {
	switch cp.GetApplyTo() {
	case networking.EnvoyFilter_EXTENSION_CONFIG:
		return "applyTo EXTENSION_CONFIG is not supported by discovery (no ECDS); not applied"
	case networking.EnvoyFilter_BOOTSTRAP:
		return "applyTo BOOTSTRAP is not applied: the bootstrap is pilot-agent's, as in istiod (which ignores it too)"
	case networking.EnvoyFilter_INVALID:
		return "no applyTo; not applied"
	}
	if cp.GetMatch().GetContext() == networking.EnvoyFilter_WAYPOINT {
		return "context WAYPOINT is not supported by discovery (no ambient waypoints); not applied"
	}
	return ""
}

// Workload is what selection and proxy matches read of a proxy.
type Workload struct {
	Namespace string
	Labels    map[string]string
	// Version is the proxy's ISTIO_VERSION; Metadata its string-valued
	// node metadata.
	Version  string
	Metadata map[string]string
}

// gatewayNameLabel marks the pods of a Gateway API gateway.
const gatewayNameLabel = "gateway.networking.k8s.io/gateway-name"

// Selects is istiod's WorkloadPolicyMatcher.ShouldAttachPolicy for f
// (which is in w's namespace or the root namespace): a workload that is
// not a Gateway API gateway is selected by the workloadSelector (none
// selects all) and never by an EnvoyFilter with targetRefs; a Gateway API
// gateway by a targetRef naming its Gateway in its own namespace, or by
// the selector when f has no targetRefs (istiod's default
// ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY).
func Selects(f *Filter, w Workload) bool {
	gw, isGateway := w.Labels[gatewayNameLabel]
	if !isGateway || len(f.TargetRefs) == 0 {
		return len(f.TargetRefs) == 0 && subset(f.Selector, w.Labels)
	}
	for _, r := range f.TargetRefs {
		if f.Namespace != w.Namespace || (r.GetNamespace() != "" && r.GetNamespace() != w.Namespace) {
			continue
		}
		if r.GetKind() == "Gateway" && canonicalGroup(r.GetGroup()) == "gateway.networking.k8s.io" && r.GetName() == gw {
			return true
		}
	}
	return false
}

func canonicalGroup(g string) string {
	if g == "" {
		return "core"
	}
	return g
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// Order sorts filters as istiod's PushContext.EnvoyFilters: by priority,
// then the root namespace's first, then the oldest first, then by
// name.namespace.
func Order(fs []*Filter, root string) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if a.Namespace != b.Namespace && (a.Namespace == root || b.Namespace == root) {
			return a.Namespace == root
		}
		if !a.Created.Equal(b.Created) {
			return a.Created.Before(b.Created)
		}
		return a.Name+"."+a.Namespace < b.Name+"."+b.Namespace
	})
}

// MatchesProxy is istiod's proxyMatch: the proxy version expression (a
// proxy without a version does not match one) and every metadata entry.
func (p *Patch) MatchesProxy(w Workload) bool {
	pm := p.Match.GetProxy()
	if pm == nil {
		return true
	}
	if p.versionNoMatch {
		return false
	}
	if p.versionPrefix != "" && !strings.HasPrefix(w.Version, p.versionPrefix) {
		return false
	}
	if p.versionRegex != nil && (w.Version == "" || !p.versionRegex.MatchString(w.Version)) {
		return false
	}
	for k, v := range pm.GetMetadata() {
		if w.Metadata[k] != v {
			return false
		}
	}
	return true
}

// Patches are the patches that apply to one proxy, per applyTo, in the
// order they apply.
type Patches map[networking.EnvoyFilter_ApplyTo][]*Patch

// For merges the patches of fs (ordered, each selecting w) that match w's
// version and metadata.
func For(fs []*Filter, w Workload) Patches {
	out := Patches{}
	for _, f := range fs {
		for _, p := range f.Patches {
			if p.MatchesProxy(w) {
				out[p.ApplyTo] = append(out[p.ApplyTo], p)
			}
		}
	}
	return out
}

// Has reports whether some patch applies to one of kinds.
func (ps Patches) Has(kinds ...networking.EnvoyFilter_ApplyTo) bool {
	for _, k := range kinds {
		if len(ps[k]) > 0 {
			return true
		}
	}
	return false
}

// ProxyDigest names which of fs's patches that read the proxy's version
// or metadata match w ("" when none reads them), for a class key.
func ProxyDigest(fs []*Filter, w Workload) string {
	var b strings.Builder
	for _, f := range fs {
		for _, p := range f.Patches {
			if p.hasProxyMatch() {
				if p.MatchesProxy(w) {
					b.WriteByte('1')
				} else {
					b.WriteByte('0')
				}
			}
		}
	}
	return b.String()
}

// contextMatch is istiod's patchContextMatch.
func (p *Patch) contextMatch(ctx networking.EnvoyFilter_PatchContext) bool {
	return p.Match.GetContext() == ctx || p.Match.GetContext() == networking.EnvoyFilter_ANY
}

// Applied records the filters whose patches changed a resource.
type Applied map[*Filter]bool

func (a Applied) note(p *Patch) {
	if a != nil {
		a[p.Owner] = true
	}
}
