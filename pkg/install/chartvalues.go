package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Install labels: every object the installer renders carries them, and
// prune and uninstall touch only objects that do.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "discovery"
	LabelComponent = "install.meshplane.io/component"
	LabelRevision  = "install.meshplane.io/revision"
)

// Component names, in the order they are applied.
const (
	ComponentBase      = "base"
	ComponentDiscovery = "discovery"
	gatewayPrefix      = "gateway-"
)

// chartJob is one chart to render with its values.
type chartJob struct {
	component string
	chart     string
	namespace string
	values    map[string]any
}

// RevisionName is the revision as labels carry it: "default" for "".
func RevisionName(rev string) string {
	if rev == "" {
		return "default"
	}
	return rev
}

// checkSpec refuses what the types cannot express: names that are not DNS
// labels, duplicate gateways, a remote profile without an address.
func checkSpec(s *Spec) error {
	var errs []error
	bad := func(path, msg string) { errs = append(errs, fmt.Errorf("%s: %s", path, msg)) }
	if msgs := validation.IsDNS1123Label(s.Namespace); len(msgs) > 0 {
		bad("namespace", fmt.Sprintf("%q is not a namespace name: %v", s.Namespace, msgs))
	}
	if s.Revision != "" {
		if msgs := validation.IsDNS1123Label(s.Revision); len(msgs) > 0 || len(s.Revision) > 40 {
			bad("revision", fmt.Sprintf("%q must be a DNS label of at most 40 characters", s.Revision))
		}
	}
	if s.Hub == "" {
		bad("hub", "must not be empty")
	}
	seen := map[string]bool{}
	for kind, gws := range map[string][]GatewayComponent{"ingressGateways": s.Components.IngressGateways, "egressGateways": s.Components.EgressGateways} {
		for i, g := range gws {
			p := fmt.Sprintf("components.%s.[%d]", kind, i)
			if msgs := validation.IsDNS1123Label(g.Name); len(msgs) > 0 {
				bad(p+".name", fmt.Sprintf("%q is not a valid name", g.Name))
			}
			if seen[g.Name] {
				bad(p+".name", fmt.Sprintf("gateway %q is defined twice", g.Name))
			}
			seen[g.Name] = true
			if g.Enabled && len(g.Label) == 0 {
				bad(p+".label", "an enabled gateway needs labels to select its pods")
			}
		}
	}
	if s.Values.Pilot.Remote {
		if _, port, err := net.SplitHostPort(s.Values.Global.RemotePilotAddress); err != nil || port == "" {
			bad("values.global.remotePilotAddress", fmt.Sprintf("the remote profile needs the remote discovery's host:port, got %q", s.Values.Global.RemotePilotAddress))
		}
	}
	return errors.Join(errs...)
}

// jobs turns the spec into the charts to render, in apply order: base,
// discovery, then the enabled gateways in the order they are listed.
func jobs(s *Spec, defaultTag string) ([]chartJob, error) {
	if err := checkSpec(s); err != nil {
		return nil, err
	}
	specMap, err := toMap(s)
	if err != nil {
		return nil, err
	}
	suffix := ""
	if s.Revision != "" {
		suffix = "-" + s.Revision
	}
	tag := s.Tag
	if tag == "" {
		tag = defaultTag
	}
	common := func() map[string]any {
		return map[string]any{
			"spec":         deepCopy(specMap),
			"namespace":    s.Namespace,
			"revision":     s.Revision,
			"revisionName": RevisionName(s.Revision),
			"suffix":       suffix,
		}
	}
	var out []chartJob
	if s.Components.Base.Enabled {
		out = append(out, chartJob{component: ComponentBase, chart: "base", namespace: s.Namespace, values: common()})
	}
	if s.Components.Pilot.Enabled {
		v := common()
		v["image"] = fmt.Sprintf("%s/%s:%s", s.Hub, s.Values.Pilot.Image, tag)
		v["remote"] = s.Values.Pilot.Remote
		v["meshConfig"] = meshConfig(s, suffix)
		out = append(out, chartJob{component: ComponentDiscovery, chart: "discovery", namespace: s.Namespace, values: v})
	}
	for _, g := range gatewayJobs(s) {
		v := common()
		gm, err := toMap(g.gw)
		if err != nil {
			return nil, err
		}
		ns := g.gw.Namespace
		if ns == "" {
			ns = s.Namespace
		}
		v["gateway"], v["gatewayType"], v["namespace"] = gm, g.kind, ns
		out = append(out, chartJob{component: gatewayPrefix + g.gw.Name, chart: "gateway", namespace: ns, values: v})
	}
	return out, nil
}

type gatewayJob struct {
	kind string
	gw   GatewayComponent
}

func gatewayJobs(s *Spec) []gatewayJob {
	var out []gatewayJob
	for _, g := range s.Components.IngressGateways {
		if g.Enabled {
			out = append(out, gatewayJob{"ingress", g})
		}
	}
	for _, g := range s.Components.EgressGateways {
		if g.Enabled {
			out = append(out, gatewayJob{"egress", g})
		}
	}
	return out
}

// meshConfig is spec.meshConfig with the defaults that depend on the
// installation: the root namespace, trust domain and discovery address.
func meshConfig(s *Spec, suffix string) map[string]any {
	mc, _ := deepCopy(s.MeshConfig).(map[string]any)
	if mc == nil {
		mc = map[string]any{}
	}
	if _, ok := mc["rootNamespace"]; !ok {
		mc["rootNamespace"] = s.Namespace
	}
	if _, ok := mc["trustDomain"]; !ok {
		mc["trustDomain"] = s.Values.Global.TrustDomain
	}
	dc, _ := mc["defaultConfig"].(map[string]any)
	if dc == nil {
		dc = map[string]any{}
	}
	if _, ok := dc["discoveryAddress"]; !ok {
		addr := s.Values.Global.RemotePilotAddress
		if !s.Values.Pilot.Remote || addr == "" {
			addr = net.JoinHostPort("istiod"+suffix+"."+s.Namespace+".svc", strconv.Itoa(15012))
		}
		dc["discoveryAddress"] = addr
	}
	mc["defaultConfig"] = dc
	return mc
}

// toMap turns a typed value into a values tree (what Helm templates read).
func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}
