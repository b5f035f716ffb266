package install

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/util/validation"
)

// checkRules refuses what the types cannot express (names, addresses,
// values the server's flags refuse) and warns where istioctl warns or a
// setting changes nothing. It runs on the normalized spec.
func checkRules(s *Spec, tree map[string]any) ([]string, error) {
	r := &rules{}
	v := &s.Values
	r.dnsLabel("namespace", v.Global.IstioNamespace, 63)
	if v.Revision != "" {
		r.dnsLabel("revision", v.Revision, 40)
	}
	for i, tag := range v.RevisionTags {
		p := fmt.Sprintf("values.revisionTags[%d]", i)
		r.dnsLabel(p, tag, 40)
		if tag == RevisionName(v.Revision) {
			r.bad(p, fmt.Sprintf("%q is the revision itself", tag))
		}
	}
	r.images(s)
	r.logging(v)
	r.proxyCapture(&v.Global.Proxy)
	r.pilot(&v.Pilot)
	r.gateways(s)
	r.k8s(s, tree)
	if v.IstiodRemote.Enabled && v.Global.RemotePilotAddress == "" {
		r.bad("values.global.remotePilotAddress", "the remote profile needs the address of the remote discovery (host, or host:port; port 15012 by default)")
	}
	if addr := v.Global.RemotePilotAddress; addr != "" {
		if _, _, err := splitRemoteAddress(addr); err != nil {
			r.bad("values.global.remotePilotAddress", err.Error())
		}
	}
	return r.warnings, errors.Join(r.errs...)
}

type rules struct {
	errs     []error
	warnings []string
}

func (r *rules) bad(path, msg string) { r.errs = append(r.errs, fmt.Errorf("%s: %s", path, msg)) }

func (r *rules) warn(format string, args ...any) {
	r.warnings = append(r.warnings, fmt.Sprintf(format, args...))
}

func (r *rules) dnsLabel(path, v string, maxLen int) {
	if msgs := validation.IsDNS1123Label(v); len(msgs) > 0 || len(v) > maxLen {
		r.bad(path, fmt.Sprintf("%q must be a DNS label of at most %d characters", v, maxLen))
	}
}

// images checks hubs and tags as istioctl does (go-containerregistry's
// reference syntax).
func (r *rules) images(s *Spec) {
	hub := func(path, h string) {
		if h == "" {
			return
		}
		if _, err := name.NewRepository(h + "/discovery"); err != nil {
			r.bad(path, fmt.Sprintf("%q is not an image registry and path: %v", h, err))
		}
	}
	tag := func(path string, t Tag) {
		if t == "" {
			return
		}
		if _, err := name.NewTag("example.com/discovery:" + string(t)); err != nil {
			r.bad(path, fmt.Sprintf("%q is not an image tag: %v", t, err))
		}
	}
	g := &s.Values.Global
	hub("values.global.hub", g.Hub)
	tag("values.global.tag", g.Tag)
	hub("values.global.proxy.hub", g.Proxy.Hub)
	tag("values.global.proxy.tag", g.Proxy.Tag)
	hub("values.pilot.hub", s.Values.Pilot.Hub)
	tag("values.pilot.tag", s.Values.Pilot.Tag)
	for _, gw := range allGateways(s) {
		hub(gw.path+".hub", gw.Hub)
		tag(gw.path+".tag", gw.Tag)
	}
}

// istioLogLevels maps Istio's levels to the server's.
var istioLogLevels = map[string]string{"debug": "debug", "info": "info", "warn": "warn", "warning": "warn", "error": "error", "fatal": "error"}

// logging checks the server's log level and format: values.pilot.logLevel,
// else Istio's global.logging.level ("default:info,ads:debug").
func (r *rules) logging(v *Values) {
	spec := v.Global.Logging.Level
	if spec == "" {
		return
	}
	const p = "values.global.logging.level"
	_, scopes, err := parseIstioLogging(spec)
	if err != nil {
		r.bad(p, err.Error())
		return
	}
	for _, sc := range scopes {
		r.warn("%s: scope %q (%s): discovery logs at one level, the default scope's; per-scope levels have no effect", p, sc[0], sc[1])
	}
	if strings.Contains(spec, "fatal") {
		r.warn("%s: discovery has no fatal level; it logs at error", p)
	}
}

// parseIstioLogging reads Istio's "scope:level,..." (a bare level is the
// default scope's) and returns the server's level for the default scope
// and the other scopes with their levels.
func parseIstioLogging(spec string) (string, [][2]string, error) {
	level := ""
	var scopes [][2]string
	for _, part := range strings.Split(spec, ",") {
		scope, lvl, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			scope, lvl = "default", scope
		}
		if lvl == "none" {
			return "", nil, fmt.Errorf("level none of scope %q: discovery cannot turn its logs off (the quietest level is error)", scope)
		}
		mapped, known := istioLogLevels[lvl]
		if !known || scope == "" {
			return "", nil, fmt.Errorf("%q: want scope:level pairs, levels debug, info, warn, error or fatal (as Istio's default:info,ads:debug)", part)
		}
		if scope == "default" {
			level = mapped
		} else {
			scopes = append(scopes, [2]string{scope, lvl})
		}
	}
	return level, scopes, nil
}

// proxyCapture checks the traffic capture settings as istioctl does.
func (r *rules) proxyCapture(p *ProxyValues) {
	for path, v := range map[string]string{"includeIPRanges": p.IncludeIPRanges, "excludeIPRanges": p.ExcludeIPRanges} {
		if v == "" || v == "*" {
			continue
		}
		for _, c := range strings.Split(v, ",") {
			if _, err := netip.ParsePrefix(strings.TrimSpace(c)); err != nil {
				r.bad("values.global.proxy."+path, fmt.Sprintf("%q is not a CIDR range: %v", c, err))
			}
		}
	}
	for path, v := range map[string]string{"includeInboundPorts": p.IncludeInboundPorts, "excludeInboundPorts": p.ExcludeInboundPorts, "excludeOutboundPorts": p.ExcludeOutboundPorts} {
		if v == "" || v == "*" {
			continue
		}
		for _, port := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(port)); err != nil || n < 0 || n > 65535 {
				r.bad("values.global.proxy."+path, fmt.Sprintf("%q is not a port number", port))
			}
		}
	}
}

// istioFlagPrefixes mark Istio's feature flags (istiod's environment),
// which discovery does not read.
var istioFlagPrefixes = []string{"PILOT_", "ISTIO_", "ENABLE_", "UNSAFE_", "EXTERNAL_", "VALIDATION_", "INJECTION_", "SHARED_MESH_CONFIG", "CLUSTER_ID", "ISTIOD_", "CA_", "CITADEL_", "XDS_", "REQUIRE_", "VERIFY_", "AUTO_", "TRUSTED_", "JWT_", "LOCAL_", "KUBECONFIG"}

func (r *rules) pilot(p *PilotValues) {
	if a := p.KeepaliveMaxServerConnectionAge; a != "" {
		d, err := time.ParseDuration(a)
		if err != nil || d < 0 || (d > 0 && d < time.Minute) {
			r.bad("values.pilot.keepaliveMaxServerConnectionAge", fmt.Sprintf("%q: want 0 (never) or a duration of at least 1m, such as 30m (it is --max-stream-age)", a))
		}
	}
	for i, a := range p.ExtraContainerArgs {
		if !strings.HasPrefix(a, "--") {
			r.bad(fmt.Sprintf("values.pilot.extraContainerArgs[%d]", i), fmt.Sprintf("%q is not a flag of discovery serve (--name=value)", a))
		}
	}
	for _, k := range sortedKeys(p.Env) {
		if k == "ENABLE_NATIVE_SIDECARS" {
			continue // values.sidecarInjectorWebhook.nativeSidecar
		}
		for _, pre := range istioFlagPrefixes {
			if strings.HasPrefix(k, pre) {
				r.warnings = append(r.warnings, noEffect(Path{keyStep("values"), keyStep("pilot"), keyStep("env"), keyStep(k)},
					"an Istio feature flag: set on the container, but discovery reads no configuration from its environment"))
				break
			}
		}
	}
	if p.AutoscaleEnabled != nil && *p.AutoscaleEnabled && p.AutoscaleMin != nil && p.AutoscaleMax != nil && *p.AutoscaleMin > *p.AutoscaleMax {
		r.bad("values.pilot.autoscaleMin", fmt.Sprintf("%d is more than values.pilot.autoscaleMax %d", *p.AutoscaleMin, *p.AutoscaleMax))
	}
}

// gatewayRef is a gateway component with the path that names it.
type gatewayRef struct {
	GatewayComponent
	path, kind string
}

func allGateways(s *Spec) []gatewayRef {
	var out []gatewayRef
	for kind, gws := range map[string][]GatewayComponent{"ingress": s.Components.IngressGateways, "egress": s.Components.EgressGateways} {
		for i, g := range gws {
			out = append(out, gatewayRef{g, fmt.Sprintf("components.%sGateways[%d]", kind, i), kind})
		}
	}
	return out
}

func (r *rules) gateways(s *Spec) {
	seen := map[string]string{}
	for _, g := range allGateways(s) {
		r.dnsLabel(g.path+".name", g.Name, 63)
		if g.Namespace != "" {
			r.dnsLabel(g.path+".namespace", g.Namespace, 63)
		}
		key := g.Namespace + "/" + g.Name
		if prev, ok := seen[key]; ok {
			r.bad(g.path+".name", fmt.Sprintf("gateway %q is defined twice (also %s)", g.Name, prev))
		}
		seen[key] = g.path
	}
	for kind, gv := range map[string]GatewayValues{"ingress": s.Values.Gateways.IstioIngressgateway, "egress": s.Values.Gateways.IstioEgressgateway} {
		if gv.Enabled != nil && !*gv.Enabled {
			r.warnings = append(r.warnings, noEffect(Path{keyStep("values"), keyStep("gateways"), keyStep("istio-" + kind + "gateway"), keyStep("enabled")},
				"false turns no gateway off, as in istioctl: use components."+kind+"Gateways[].enabled"))
		}
	}
}

// k8s checks components.*.k8s where istioctl warns or would break the
// rendered objects.
func (r *rules) k8s(s *Spec, tree map[string]any) {
	comps, _ := tree["components"].(map[string]any)
	check := func(path string, k any, autoscale *bool) {
		m, ok := k.(map[string]any)
		if !ok {
			return
		}
		if hpa, ok := m["hpaSpec"].(map[string]any); ok && hpa["scaleTargetRef"] != nil {
			r.bad(path+".hpaSpec.scaleTargetRef", "not supported by discovery: the autoscaler always targets the component's Deployment")
		}
		if n, ok := m["replicaCount"].(float64); ok && n > 1 && (autoscale == nil || *autoscale) {
			r.warn("%s.replicaCount should not be set when the autoscaler is on (values.*.autoscaleEnabled): it scales the Deployment", path)
		}
	}
	if pilot, ok := comps["pilot"].(map[string]any); ok {
		check("components.pilot.k8s", pilot["k8s"], s.Values.Pilot.AutoscaleEnabled)
	}
	for _, g := range allGateways(s) {
		l, _ := comps[g.kind+"Gateways"].([]any)
		gv := s.Values.Gateways.IstioIngressgateway
		if g.kind == "egress" {
			gv = s.Values.Gateways.IstioEgressgateway
		}
		for _, e := range l {
			if m, ok := e.(map[string]any); ok && m["name"] == g.Name {
				check(g.path+".k8s", m["k8s"], gv.AutoscaleEnabled)
			}
		}
	}
	if base, ok := comps["base"].(map[string]any); ok {
		if k, ok := base["k8s"].(map[string]any); ok {
			for _, f := range sortedKeys(k) {
				if f != "overlays" {
					r.warnings = append(r.warnings, noEffect(Path{keyStep("components"), keyStep("base"), keyStep("k8s"), keyStep(f)}, "the base chart has no Deployment or Service; only overlays apply"))
				}
			}
		}
	}
}

// splitRemoteAddress reads values.global.remotePilotAddress as Istio's
// remote profile takes it: a host or IP address, with or without a port
// (15012 by default).
func splitRemoteAddress(addr string) (host, port string, err error) {
	if ip, perr := netip.ParseAddr(strings.Trim(addr, "[]")); perr == nil {
		return ip.String(), "15012", nil
	}
	if h, p, serr := splitHostPort(addr); serr == nil {
		return h, p, nil
	}
	if msgs := validation.IsDNS1123Subdomain(addr); len(msgs) > 0 {
		return "", "", fmt.Errorf("%q is neither a host, an IP address nor host:port", addr)
	}
	return addr, "15012", nil
}

func splitHostPort(addr string) (string, string, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", errors.New("no port")
	}
	host, port := strings.Trim(addr[:i], "[]"), addr[i+1:]
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", "", fmt.Errorf("port %q", port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.String(), port, nil
	}
	if msgs := validation.IsDNS1123Subdomain(host); len(msgs) > 0 {
		return "", "", fmt.Errorf("host %q", host)
	}
	return host, port, nil
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}
