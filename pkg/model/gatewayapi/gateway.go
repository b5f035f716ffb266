package gatewayapi

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gw "sigs.k8s.io/gateway-api/apis/v1"
)

// gateway is one Gateway of ours being translated.
type gateway struct {
	obj       *gw.Gateway
	ref       Ref
	report    *Report
	listeners []*listener
}

// listener is one listener of a Gateway of ours.
type listener struct {
	gw   *gateway
	spec gw.Listener
	// valid is set when routes may attach (Accepted and Programmed as a
	// listener); served when it also became an Istio Gateway.
	valid, served bool
	tls           *networking.ServerTLSSettings
	// name is its Istio Gateway's name (in the Gateway's namespace).
	name       string
	namespaces []string // allowed route namespaces; "*" for all
	kinds      []gw.RouteGroupKind
	attached   int32
	conds      []metav1.Condition
}

// istioName is the Istio Gateway's namespace/name, as VirtualServices
// name it in gateways.
func (l *listener) istioName() string { return l.gw.obj.Namespace + "/" + l.name }

// hostname is the listener's hostname, "" for any.
func (l *listener) hostname() string { return string(ptrOr(l.spec.Hostname, "")) }

func (t *translator) translateGateway(obj *gw.Gateway) {
	if !t.ours(string(obj.Spec.GatewayClassName)) {
		return
	}
	g := &gateway{obj: obj, ref: Ref{Kind: KindGateway, Namespace: obj.Namespace, Name: obj.Name}}
	g.report = t.report(g.ref, obj.Generation)
	t.gateways[[2]string{obj.Namespace, obj.Name}] = g
	selector, programmed, why := t.deployment(g)
	if obj.Spec.TLS != nil {
		g.unsupported("spec.tls", "frontend validation and backend client certificates are not read yet")
	}
	conflicts := listenerConflicts(obj.Spec.Listeners)
	for i, l := range obj.Spec.Listeners {
		ls := t.listener(g, l)
		if reason, ok := conflicts[i]; ok {
			ls.conflicted(reason)
		}
		g.listeners = append(g.listeners, ls)
		if ls.valid && selector != nil {
			t.out.Gateways = append(t.out.Gateways, t.istioGateway(ls, selector))
			ls.served = true
		}
	}
	accepted, valid := 0, 0
	for _, l := range g.listeners {
		if listenerAccepted(l) {
			accepted++
		}
		if l.valid {
			valid++
		}
	}
	gen := obj.Generation
	switch {
	case badParametersRef(obj) != "":
		// As istiod's validateParametersRef; whether a ConfigMap named
		// exists is the automated deployment's to find (pkg/gatewaydeploy).
		g.report.Conditions = append(g.report.Conditions, condition(string(gw.GatewayConditionAccepted), false,
			string(gw.GatewayReasonInvalidParameters), badParametersRef(obj), gen))
	case accepted == 0 && len(g.listeners) > 0:
		g.report.Conditions = append(g.report.Conditions, condition(string(gw.GatewayConditionAccepted), false,
			string(gw.GatewayReasonListenersNotValid), "no listener is valid", gen))
	case valid < len(g.listeners):
		// As istiod: still accepted while one listener is, with the reason
		// that says some are not.
		g.report.Conditions = append(g.report.Conditions, condition(string(gw.GatewayConditionAccepted), true,
			string(gw.GatewayReasonListenersNotValid), "one or more of the Gateway's listeners are invalid", gen))
	default:
		g.report.Conditions = append(g.report.Conditions, condition(string(gw.GatewayConditionAccepted), true,
			string(gw.GatewayReasonAccepted), "Resource accepted", gen))
	}
	reason := string(gw.GatewayReasonProgrammed)
	if !programmed {
		reason = string(gw.GatewayReasonNoResources)
		if len(obj.Spec.Addresses) > 0 {
			reason = string(gw.GatewayReasonAddressNotAssigned)
		}
	}
	g.report.Conditions = append(g.report.Conditions, condition(string(gw.GatewayConditionProgrammed), programmed, reason, why, gen))
}

// badParametersRef says why spec.infrastructure.parametersRef cannot be
// read ("" when it can, or there is none): only a ConfigMap can.
func badParametersRef(obj *gw.Gateway) string {
	if obj.Spec.Infrastructure == nil || obj.Spec.Infrastructure.ParametersRef == nil {
		return ""
	}
	ref := obj.Spec.Infrastructure.ParametersRef
	if ref.Group != "" || ref.Kind != "ConfigMap" {
		return fmt.Sprintf("unsupported parametersRef group/kind %s/%s, only ConfigMap is supported", ref.Group, ref.Kind)
	}
	return ""
}

func listenerAccepted(l *listener) bool {
	for _, c := range l.conds {
		if c.Type == string(gw.ListenerConditionAccepted) {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func (g *gateway) unsupported(field, what string) {
	g.report.Unsupported = append(g.report.Unsupported, field+": "+what)
}

// deployment decides which proxies serve g: the selector of the Service
// spec.addresses names (manual mode), else the pods of Istio's automated
// deployment. programmed says whether the Service in front of them
// exists; why is the Programmed condition's message. A nil selector
// serves nothing.
func (t *translator) deployment(g *gateway) (selector map[string]string, programmed bool, why string) {
	obj := g.obj
	// One IP address is Istio's automated deployment too (its Service's
	// loadBalancerIP), as istiod's IsManaged.
	oneIP := len(obj.Spec.Addresses) == 1 && obj.Spec.Addresses[0].Type != nil && *obj.Spec.Addresses[0].Type == gw.IPAddressType
	var hosts []string
	for i, a := range obj.Spec.Addresses {
		if oneIP {
			break
		}
		if a.Type != nil && *a.Type != gw.HostnameAddressType {
			g.unsupported(fmt.Sprintf("spec.addresses[%d]", i), fmt.Sprintf("type %s is not supported (only Hostname, naming the gateway's Service)", *a.Type))
			continue
		}
		hosts = append(hosts, a.Value)
	}
	if len(obj.Spec.Addresses) == 0 || oneIP {
		// Istio's automated deployment (pkg/gatewaydeploy): pods labelled
		// with the Gateway's name, behind the Service <name>-<class> (or
		// the gateway.istio.io/name-override annotation's name).
		sel := map[string]string{GatewayNameLabel: obj.Name}
		svc := obj.Name + "-" + string(obj.Spec.GatewayClassName)
		if v := obj.Annotations["gateway.istio.io/name-override"]; v != "" {
			svc = v
		}
		if _, ok := t.in.Service(obj.Namespace, svc); ok {
			return sel, true, fmt.Sprintf("Served by the pods labelled %s=%s, behind the Service %s", GatewayNameLabel, obj.Name, svc)
		}
		return sel, false, fmt.Sprintf("no Service %s yet: the automated deployment creates it with pods labelled %s=%s (unless turned off: then deploy them, or name an existing gateway Service in spec.addresses)",
			svc, GatewayNameLabel, obj.Name)
	}
	for _, h := range hosts {
		ns, name, ok := serviceOfHost(h, obj.Namespace, t.in.DomainSuffix)
		if !ok {
			continue
		}
		svc, found := t.in.Service(ns, name)
		if !found || len(svc.Selector) == 0 {
			continue
		}
		if ns != obj.Namespace {
			// istiod: the Service may be anywhere; its pods' namespace is
			// the gateway's. Here the selector applies in every namespace.
			g.unsupported("spec.addresses", "a Service of another namespace selects pods by its labels in every namespace")
		}
		return svc.Selector, true, fmt.Sprintf("Served by the pods of the Service %s/%s", ns, name)
	}
	return nil, false, fmt.Sprintf("no Service with a selector found for spec.addresses %v", hosts)
}

// serviceOfHost reads a Service name (name, or name.ns.svc.<suffix>).
func serviceOfHost(h, ns, suffix string) (string, string, bool) {
	if !strings.Contains(h, ".") {
		return ns, h, h != ""
	}
	rest, ok := strings.CutSuffix(h, ".svc."+suffix)
	if !ok {
		return "", "", false
	}
	name, sns, ok := strings.Cut(rest, ".")
	return sns, name, ok && !strings.Contains(sns, ".")
}

// listener judges one listener; valid says whether it can be served.
func (t *translator) listener(g *gateway, l gw.Listener) *listener {
	ls := &listener{gw: g, spec: l, name: g.obj.Name + "-" + autogenerated + "-" + string(l.Name)}
	gen := g.obj.Generation
	accepted, acceptReason, acceptMsg := true, string(gw.ListenerReasonAccepted), "No errors found"
	resolved, resolvedReason, resolvedMsg := true, string(gw.ListenerReasonResolvedRefs), "No errors found"
	switch l.Protocol {
	case gw.HTTPProtocolType, gw.HTTPSProtocolType, gw.TLSProtocolType, gw.TCPProtocolType:
	default:
		accepted, acceptReason = false, string(gw.ListenerReasonUnsupportedProtocol)
		acceptMsg = fmt.Sprintf("protocol %s is not supported by discovery yet (HTTP, HTTPS, TLS and TCP are)", l.Protocol)
		g.unsupported(fmt.Sprintf("spec.listeners[%s].protocol", l.Name), acceptMsg)
	}
	kinds, badKinds := supportedKinds(l)
	if !accepted {
		kinds, badKinds = nil, "" // nothing is supported on a protocol discovery does not serve
	}
	if accepted && len(kinds) == 0 && terminatesTLSRoute(l) {
		// TLSRoute on a TLS listener of mode Terminate is not served
		// (istiod serves it): the spec's answer for a mode not supported
		// is Accepted=False UnsupportedValue.
		accepted, acceptReason = false, string(gw.ListenerReasonUnsupportedValue)
		acceptMsg = "TLSRoute on a TLS listener of mode Terminate is not supported by discovery (mode Passthrough is; TCPRoute takes terminated TLS)"
		g.unsupported(fmt.Sprintf("spec.listeners[%s].tls.mode", l.Name), acceptMsg)
	}
	ls.kinds = kinds
	if badKinds != "" {
		resolved, resolvedReason, resolvedMsg = false, string(gw.ListenerReasonInvalidRouteKinds), badKinds
	}
	ls.namespaces = t.allowedNamespaces(g.obj.Namespace, l.AllowedRoutes)
	var tls *networking.ServerTLSSettings
	needsTLS := l.Protocol == gw.HTTPSProtocolType || l.Protocol == gw.TLSProtocolType
	switch {
	case !accepted || !needsTLS:
	case l.Protocol == gw.TLSProtocolType && l.TLS == nil:
		// istiod builds no server for it either.
		resolved, resolvedReason, resolvedMsg = false, string(gw.ListenerReasonInvalidCertificateRef), "a TLS listener needs a tls section (mode Passthrough, or Terminate with certificateRefs)"
	case l.Protocol == gw.TLSProtocolType && ptrOr(l.TLS.Mode, gw.TLSModeTerminate) == gw.TLSModePassthrough:
		// The client's TLS goes through to the backend, chosen by SNI.
		tls = &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_PASSTHROUGH}
		if len(l.TLS.CertificateRefs) > 0 {
			g.unsupported(fmt.Sprintf("spec.listeners[%s].tls.certificateRefs", l.Name), "not used in mode Passthrough")
		}
	default:
		var ok bool
		var reason, msg string
		tls, ok, reason, msg = t.listenerTLS(g, l)
		if !ok {
			resolved, resolvedReason, resolvedMsg = false, reason, msg
		}
	}
	programmed := accepted && (!needsTLS || tls != nil)
	ls.valid = programmed
	progReason, progMsg := string(gw.ListenerReasonProgrammed), "No errors found"
	if !programmed {
		progReason, progMsg = string(gw.ListenerReasonInvalid), "not served"
	}
	ls.conds = []metav1.Condition{
		condition(string(gw.ListenerConditionAccepted), accepted, acceptReason, acceptMsg, gen),
		condition(string(gw.ListenerConditionConflicted), false, string(gw.ListenerReasonNoConflicts), "No errors found", gen),
		condition(string(gw.ListenerConditionProgrammed), programmed, progReason, progMsg, gen),
		condition(string(gw.ListenerConditionResolvedRefs), resolved, resolvedReason, resolvedMsg, gen),
	}
	if programmed {
		ls.tls = tls
	}
	return ls
}

// conflicted marks l as conflicting with an earlier listener, as
// istiod's ReportListenerConflict: not accepted, not programmed,
// Conflicted=True with reason; routes do not attach and it is not served.
func (l *listener) conflicted(reason gw.ListenerConditionReason) {
	msg := "Listener has a conflict with another listener of the Gateway (same port; same hostname, or a protocol that cannot share the port)"
	gen := l.gw.obj.Generation
	for i, c := range l.conds {
		switch gw.ListenerConditionType(c.Type) {
		case gw.ListenerConditionAccepted, gw.ListenerConditionProgrammed:
			l.conds[i] = condition(c.Type, false, string(reason), msg, gen)
		case gw.ListenerConditionConflicted:
			l.conds[i] = condition(c.Type, true, string(reason), msg, gen)
		}
	}
	l.valid, l.tls = false, nil
}

// terminatesTLSRoute reports whether l is a TLS listener of mode
// Terminate whose allowedRoutes asks for TLSRoute.
func terminatesTLSRoute(l gw.Listener) bool {
	if l.Protocol != gw.TLSProtocolType || l.TLS == nil || ptrOr(l.TLS.Mode, gw.TLSModeTerminate) != gw.TLSModeTerminate || l.AllowedRoutes == nil {
		return false
	}
	for _, k := range l.AllowedRoutes.Kinds {
		if k.Kind == KindTLSRoute && ptrOr(k.Group, gw.GroupName) == gw.GroupName {
			return true
		}
	}
	return false
}

// supportedKinds are the route kinds a listener takes, by protocol as
// istiod's GenerateGatewaySupportedKinds: HTTPRoute and GRPCRoute on HTTP
// and HTTPS, TCPRoute on TCP, TLSRoute on TLS Passthrough, TCPRoute on
// TLS Terminate (istiod also lists TLSRoute there; discovery routes a
// terminated TLS listener's connections by TCPRoute only); limited to
// allowedRoutes.kinds when given. bad names the kinds it does not
// support.
func supportedKinds(l gw.Listener) ([]gw.RouteGroupKind, string) {
	group := gw.Group(gw.GroupName)
	var names []gw.Kind
	switch l.Protocol {
	case gw.TCPProtocolType:
		names = []gw.Kind{KindTCPRoute}
	case gw.TLSProtocolType:
		names = []gw.Kind{KindTCPRoute}
		if l.TLS != nil && ptrOr(l.TLS.Mode, gw.TLSModeTerminate) == gw.TLSModePassthrough {
			names = []gw.Kind{KindTLSRoute}
		}
	default:
		names = []gw.Kind{KindHTTPRoute, KindGRPCRoute}
	}
	var all []gw.RouteGroupKind
	for _, n := range names {
		all = append(all, gw.RouteGroupKind{Group: &group, Kind: n})
	}
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return all, ""
	}
	var out []gw.RouteGroupKind
	var bad []string
	for _, k := range l.AllowedRoutes.Kinds {
		if ptrOr(k.Group, gw.Group(gw.GroupName)) == gw.GroupName && slices.Contains(names, k.Kind) {
			out = append(out, gw.RouteGroupKind{Group: &group, Kind: k.Kind})
			continue
		}
		bad = append(bad, string(ptrOr(k.Group, gw.GroupName))+"/"+string(k.Kind))
	}
	if len(bad) > 0 {
		return out, "route kinds not supported: " + strings.Join(bad, ", ")
	}
	return out, ""
}

// allowedNamespaces resolves allowedRoutes.namespaces (istiod's
// namespacesFromSelector): the Gateway's own by default, "*" for All,
// the matching namespaces for a Selector.
func (t *translator) allowedNamespaces(local string, ar *gw.AllowedRoutes) []string {
	if ar == nil || ar.Namespaces == nil || ar.Namespaces.From == nil || *ar.Namespaces.From == gw.NamespacesFromSame {
		return []string{local}
	}
	switch *ar.Namespaces.From {
	case gw.NamespacesFromAll:
		return []string{"*"}
	case gw.NamespacesFromSelector:
		if ar.Namespaces.Selector == nil {
			return nil
		}
		sel, err := metav1.LabelSelectorAsSelector(ar.Namespaces.Selector)
		if err != nil {
			return nil
		}
		var out []string
		for name, lbls := range t.in.Namespaces {
			set := labels.Set{"kubernetes.io/metadata.name": name}
			for k, v := range lbls {
				set[k] = v
			}
			if sel.Matches(set) {
				out = append(out, name)
			}
		}
		sort.Strings(out)
		return out
	}
	return nil // None
}

// admits reports whether a route of namespace ns and kind may attach.
func (l *listener) admits(ns, kind string) (bool, string) {
	kindOK := false
	for _, k := range l.kinds {
		if string(k.Kind) == kind {
			kindOK = true
		}
	}
	if !kindOK {
		return false, fmt.Sprintf("listener %s does not allow %s", l.spec.Name, kind)
	}
	for _, n := range l.namespaces {
		if n == "*" || n == ns {
			return true, ""
		}
	}
	return false, fmt.Sprintf("listener %s does not allow routes of namespace %s", l.spec.Name, ns)
}

// istioGateway is the Istio Gateway of one served listener.
func (t *translator) istioGateway(l *listener, selector map[string]string) *networkingv1.Gateway {
	host := l.hostname()
	if host == "" || l.spec.Protocol == gw.TCPProtocolType {
		host = "*" // a TCP listener's hostname means nothing
	}
	var hosts []string
	for _, ns := range l.namespaces {
		hosts = append(hosts, ns+"/"+host)
	}
	if len(hosts) == 0 {
		hosts = []string{"~/" + host} // istiod: matches no route, keeps the listener
	}
	obj := l.gw.obj
	return &networkingv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{
			Name: l.name, Namespace: obj.Namespace, CreationTimestamp: obj.CreationTimestamp,
			Annotations: map[string]string{AnnotationDerivedFrom: derivedFrom([]Ref{l.gw.ref})},
		},
		Spec: networking.Gateway{
			Selector: selector,
			Servers: []*networking.Server{{
				Port:  &networking.Port{Name: "default", Number: uint32(l.spec.Port), Protocol: string(l.spec.Protocol)},
				Hosts: hosts,
				Tls:   l.tls,
			}},
		},
	}
}

// finishGateways writes each Gateway's listener status, with the number
// of routes attached to each.
func (t *translator) finishGateways() {
	for _, g := range t.gateways {
		for _, l := range g.listeners {
			g.report.Listeners = append(g.report.Listeners, gw.ListenerStatus{
				Name: l.spec.Name, SupportedKinds: l.kinds, AttachedRoutes: l.attached, Conditions: l.conds,
			})
		}
	}
}
