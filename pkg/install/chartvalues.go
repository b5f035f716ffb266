package install

import (
	"fmt"
	"strings"
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

// chartJob is one chart to render with its values, and what is laid over
// its objects afterwards.
type chartJob struct {
	component string
	chart     string
	namespace string
	values    map[string]any
	// k8s is the component's components.*.k8s as written (patch.go), and
	// targets the names of the objects it applies to.
	k8s     map[string]any
	targets patchTargets
}

// defaultRevision is the default revision's name in labels.
const defaultRevision = "default"

// RevisionName is the revision as labels carry it: "default" for "".
func RevisionName(rev string) string {
	if rev == "" {
		return defaultRevision
	}
	return rev
}

// installerOnly are values the installer reads and the base and
// discovery charts do not take (their schema refuses them).
var installerOnly = []string{"gateways", "profile"}

// jobs turns the loaded input into the charts to render, in apply order:
// base, discovery, then the enabled gateways in the order they are listed.
// A revisioned control plane is rendered without gateways: as Istio
// advises, gateways are installed apart from it (a bootstrap of the
// revision without the control plane); the note says so.
func jobs(l *Loaded) ([]chartJob, []string) {
	s, tree := l.Spec, l.Tree
	values := deepCopy(tree["values"]).(map[string]any)
	for _, k := range installerOnly {
		delete(values, k)
	}
	comps, _ := tree["components"].(map[string]any)
	ns := s.Values.Global.IstioNamespace
	suffix := ""
	if s.Values.Revision != "" {
		suffix = "-" + s.Values.Revision
	}
	var out []chartJob
	if enabledOr(s.Components.Base.Enabled, true) {
		out = append(out, chartJob{
			component: ComponentBase, chart: "base", namespace: ns, values: deepCopy(values).(map[string]any),
			k8s: k8sOf(comps["base"]),
		})
	}
	if enabledOr(s.Values.Pilot.Enabled, true) {
		pilotScaling(values, k8sOf(comps["pilot"]))
		out = append(out, chartJob{
			component: ComponentDiscovery, chart: "discovery", namespace: ns, values: values,
			k8s: k8sOf(comps["pilot"]),
			targets: patchTargets{
				deployment: "discovery" + suffix, container: "discovery",
				services: []string{"istiod" + suffix, "discovery" + suffix}, scaling: "discovery" + suffix,
			},
		})
	}
	gws := gatewayJobs(s, tree)
	var notes []string
	if s.Values.Revision != "" && enabledOr(s.Values.Pilot.Enabled, true) && len(gws) > 0 {
		notes = append(notes, revisionGatewayNote(s.Values.Revision, gws))
		gws = nil
	}
	for _, g := range gws {
		gns := g.gw.Namespace
		if gns == "" {
			gns = ns
		}
		out = append(out, chartJob{
			component: gatewayPrefix + g.gw.Name, chart: "gateway", namespace: gns,
			values: gatewayChartValues(s, tree, g), k8s: g.k8s,
			targets: patchTargets{deployment: g.gw.Name, container: "istio-proxy", services: []string{g.gw.Name}, scaling: g.gw.Name},
		})
	}
	return out, notes
}

// revisionGatewayNote says why a revisioned control plane's gateways are
// not rendered, and how to install a gateway of the revision.
func revisionGatewayNote(rev string, gws []gatewayJob) string {
	names := make([]string, len(gws))
	for i, g := range gws {
		names[i] = g.gw.Name
	}
	kind := gws[0].kind
	return fmt.Sprintf("revision %s: gateways are installed apart from a revisioned control plane, as Istio advises, so %s %s not rendered; "+
		"existing gateways keep running with the install that made them. A gateway of revision %s, on its own: "+
		"discovery bootstrap --revision %s --profile empty --set components.%sGateways[0].name=%s-%s --set components.%sGateways[0].enabled=true",
		rev, strings.Join(names, ", "), map[bool]string{true: "is", false: "are"}[len(names) == 1], rev, rev, kind, gws[0].gw.Name, rev, kind)
}

// pilotScaling sets values.pilot's replica count and autoscaler bounds
// from components.pilot.k8s, as istioctl does before rendering, so that
// the chart's decisions (a PodDisruptionBudget with more than one replica)
// see them; the rest of k8s is laid over the rendered objects.
func pilotScaling(values, k8s map[string]any) {
	pilot, _ := values["pilot"].(map[string]any)
	if pilot == nil || k8s == nil {
		return
	}
	if n, ok := k8s["replicaCount"]; ok && n != nil {
		pilot["replicaCount"] = n
	}
	if hpa, ok := k8s["hpaSpec"].(map[string]any); ok {
		rename(pilot, hpa, map[string]string{"minReplicas": "autoscaleMin", "maxReplicas": "autoscaleMax"})
	}
}

func enabledOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

func k8sOf(component any) map[string]any {
	m, _ := component.(map[string]any)
	k, _ := m["k8s"].(map[string]any)
	return k
}

type gatewayJob struct {
	kind string // ingress or egress
	gw   GatewayComponent
	raw  map[string]any // the component as written
	k8s  map[string]any
}

// gatewayJobs are the enabled gateways. As in istioctl, a gateway without
// enabled is on, and values.gateways.istio-<kind>gateway.enabled=true
// turns on every gateway of its kind.
func gatewayJobs(s *Spec, tree map[string]any) []gatewayJob {
	comps, _ := tree["components"].(map[string]any)
	var out []gatewayJob
	for _, kind := range []string{"ingress", "egress"} {
		gws := s.Components.IngressGateways
		alt := s.Values.Gateways.IstioIngressgateway.Enabled
		if kind == "egress" {
			gws, alt = s.Components.EgressGateways, s.Values.Gateways.IstioEgressgateway.Enabled
		}
		raws, _ := comps[kind+"Gateways"].([]any)
		for i, g := range gws {
			if !enabledOr(g.Enabled, true) && !enabledOr(alt, false) {
				continue
			}
			raw, _ := raws[i].(map[string]any)
			out = append(out, gatewayJob{kind: kind, gw: g, raw: raw, k8s: k8sOf(raw)})
		}
	}
	return out
}

// gatewayChartValues are the gateway chart's values for one gateway:
// values.gateways.istio-<kind>gateway (Istio's defaults for every gateway
// of the kind) under the component's name, labels, hub and tag, with
// components.*.k8s.service.ports as the Service's ports (the rest of k8s
// is laid over the rendered objects).
func gatewayChartValues(s *Spec, tree map[string]any, g gatewayJob) map[string]any {
	values, _ := tree["values"].(map[string]any)
	gateways, _ := values["gateways"].(map[string]any)
	gv, _ := gateways["istio-"+g.kind+"gateway"].(map[string]any)
	gv, _ = deepCopy(gv).(map[string]any)
	if gv == nil {
		gv = map[string]any{}
	}
	out := map[string]any{"name": g.gw.Name, "revision": s.Values.Revision}
	copyKeys(out, gv, "env", "nodeSelector", "tolerations", "resources")
	labels, _ := merge(gv["labels"], toAny(g.gw.Label)).(map[string]any)
	if len(labels) > 0 {
		out["labels"] = labels
	}
	pod, _ := gv["podAnnotations"].(map[string]any)
	if pod == nil {
		pod = map[string]any{}
	}
	if t, ok := gv["injectionTemplate"].(string); ok && t != "" {
		pod["inject.istio.io/templates"] = t
	}
	if img := gatewayProxyImage(s, g.gw); img != "" {
		pod["sidecar.istio.io/proxyImage"] = img
	}
	if len(pod) > 0 {
		out["podAnnotations"] = pod
	}
	svc := map[string]any{}
	rename(svc, gv, map[string]string{
		"type": "type", "ports": "ports", "serviceAnnotations": "annotations", "loadBalancerIP": "loadBalancerIP",
		"loadBalancerSourceRanges": "loadBalancerSourceRanges", "externalTrafficPolicy": "externalTrafficPolicy", "ipFamilies": "ipFamilies", "ipFamilyPolicy": "ipFamilyPolicy",
	})
	if k, ok := g.k8s["service"].(map[string]any); ok {
		if ports, ok := k["ports"].([]any); ok && len(ports) > 0 {
			svc["ports"] = ports
		}
	}
	if len(svc) > 0 {
		out["service"] = svc
	}
	as := map[string]any{}
	rename(as, gv, map[string]string{"autoscaleEnabled": "enabled", "autoscaleMin": "minReplicas", "autoscaleMax": "maxReplicas"})
	if cpu, ok := gv["cpu"].(map[string]any); ok && cpu["targetAverageUtilization"] != nil {
		as["targetCPUUtilizationPercentage"] = cpu["targetAverageUtilization"]
	}
	if mem, ok := gv["memory"].(map[string]any); ok && mem["targetAverageUtilization"] != nil {
		as["targetMemoryUtilizationPercentage"] = mem["targetAverageUtilization"]
	}
	if hpa, ok := g.k8s["hpaSpec"].(map[string]any); ok {
		rename(as, hpa, map[string]string{"minReplicas": "minReplicas", "maxReplicas": "maxReplicas"})
	}
	if len(as) > 0 {
		out["autoscaling"] = as
	}
	if n, ok := g.k8s["replicaCount"]; ok {
		out["replicaCount"] = n
	} else if n, ok := gv["replicaCount"]; ok {
		out["replicaCount"] = n
	}
	ru := map[string]any{}
	rename(ru, gv, map[string]string{"rollingMaxSurge": "maxSurge", "rollingMaxUnavailable": "maxUnavailable"})
	if len(ru) > 0 {
		out["strategy"] = map[string]any{"rollingUpdate": ru}
	}
	if sa, ok := gv["serviceAccount"].(map[string]any); ok && len(sa) > 0 {
		out["serviceAccount"] = sa
	}
	if gatewayNeedsBudget(s, out) {
		out["podDisruptionBudget"] = map[string]any{"minAvailable": 1}
	}
	glob := s.Values.Global
	if len(glob.ImagePullSecrets) > 0 {
		var secrets []any
		for _, n := range glob.ImagePullSecrets {
			secrets = append(secrets, map[string]any{"name": n})
		}
		out["imagePullSecrets"] = secrets
	}
	if glob.PriorityClassName != "" {
		out["priorityClassName"] = glob.PriorityClassName
	}
	return out
}

// gatewayNeedsBudget says, as Istio's gateway charts do, whether a
// gateway gets a PodDisruptionBudget: with global.defaultPodDisruptionBudget
// on and more than one replica (the autoscaler's minimum, when on).
func gatewayNeedsBudget(s *Spec, vals map[string]any) bool {
	if !enabledOr(s.Values.Global.DefaultPodDisruptionBudget.Enabled, true) {
		return false
	}
	as, _ := vals["autoscaling"].(map[string]any)
	if on, ok := as["enabled"].(bool); !ok || on {
		min, _ := as["minReplicas"].(float64)
		return min > 1
	}
	n, _ := vals["replicaCount"].(float64)
	return n > 1
}

// gatewayProxyImage is the proxy image of a gateway with its own hub or
// tag, else "" (the injector's).
func gatewayProxyImage(s *Spec, g GatewayComponent) string {
	if g.Hub == "" && g.Tag == "" {
		return ""
	}
	p := s.Values.Global.Proxy
	img := p.Image
	if img == "" {
		img = "proxyv2"
	}
	if strings.Contains(img, "/") {
		return img
	}
	hub := firstNonEmpty(g.Hub, s.Values.Global.Hub, p.Hub)
	tag := firstNonEmpty(string(g.Tag), string(s.Values.Global.Tag), string(p.Tag))
	return fmt.Sprintf("%s/%s:%s", hub, img, tag)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func copyKeys(dst, src map[string]any, keys ...string) {
	for _, k := range keys {
		if v, ok := src[k]; ok && v != nil {
			dst[k] = v
		}
	}
}

func rename(dst, src map[string]any, names map[string]string) {
	for from, to := range names {
		if v, ok := src[from]; ok && v != nil {
			dst[to] = v
		}
	}
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
