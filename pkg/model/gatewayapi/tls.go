package gatewayapi

import (
	"fmt"
	"sort"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	gw "sigs.k8s.io/gateway-api/apis/v1"
)

// grants indexes ReferenceGrants by the namespace they live in (the
// namespace of what they let others refer to).
type grants map[string][]*gw.ReferenceGrant

func newGrants(in []*gw.ReferenceGrant) grants {
	g := grants{}
	for _, r := range in {
		g[r.Namespace] = append(g[r.Namespace], r)
	}
	return g
}

// allowed reports whether an object of group/kind in fromNS may refer to
// toGroup/toKind toName in toNS. The same namespace always may.
func (g grants) allowed(group, kind, fromNS, toGroup, toKind, toNS, toName string) bool {
	if fromNS == toNS {
		return true
	}
	for _, r := range g[toNS] {
		from, to := false, false
		for _, f := range r.Spec.From {
			if string(f.Group) == group && string(f.Kind) == kind && string(f.Namespace) == fromNS {
				from = true
			}
		}
		for _, t := range r.Spec.To {
			if string(t.Group) == toGroup && string(t.Kind) == toKind && (t.Name == nil || string(*t.Name) == toName) {
				to = true
			}
		}
		if from && to {
			return true
		}
	}
	return false
}

// tlsTerminateOptions are Istio's listener tls options.
const optionTerminateMode = "gateway.istio.io/tls-terminate-mode"

// listenerTLS builds an HTTPS listener's server TLS settings from its
// certificateRefs (Secrets; another namespace's only with a
// ReferenceGrant). ok false gives the ResolvedRefs reason and message; a
// listener without a usable certificate is not served (istiod keeps the
// server without a credential, which Envoy cannot serve either).
func (t *translator) listenerTLS(g *gateway, l gw.Listener) (tls *networking.ServerTLSSettings, ok bool, reason, msg string) {
	field := fmt.Sprintf("spec.listeners[%s].tls", l.Name)
	if l.TLS == nil {
		return nil, false, string(gw.ListenerReasonInvalidCertificateRef), "an HTTPS listener needs tls.certificateRefs"
	}
	if ptrOr(l.TLS.Mode, gw.TLSModeTerminate) != gw.TLSModeTerminate {
		return nil, false, string(gw.ListenerReasonInvalidCertificateRef), "HTTPS listeners terminate TLS (mode Passthrough needs protocol TLS)"
	}
	if len(l.TLS.Options) > 0 {
		var keys []string
		for k := range l.TLS.Options {
			keys = append(keys, string(k))
		}
		sort.Strings(keys)
		g.unsupported(field+".options", strings.Join(keys, ", ")+" not read yet (Istio's "+optionTerminateMode+" among them)")
	}
	var creds []string
	var problems []string
	reason = string(gw.ListenerReasonInvalidCertificateRef)
	for i, ref := range l.TLS.CertificateRefs {
		if ptrOr(ref.Group, "") != "" || ptrOr(ref.Kind, "Secret") != "Secret" {
			problems = append(problems, fmt.Sprintf("certificateRefs[%d]: only Secrets are supported, not %s/%s", i, ptrOr(ref.Group, ""), ptrOr(ref.Kind, "")))
			continue
		}
		ns := string(ptrOr(ref.Namespace, gw.Namespace(g.obj.Namespace)))
		if !t.grants.allowed(gw.GroupName, "Gateway", g.obj.Namespace, "", "Secret", ns, string(ref.Name)) {
			m := fmt.Sprintf("certificateRefs[%d]: Secret %s/%s is not permitted to a Gateway of namespace %s (no ReferenceGrant)", i, ns, ref.Name, g.obj.Namespace)
			problems = append(problems, m)
			g.report.Denied = append(g.report.Denied, field+"."+m)
			reason = string(gw.ListenerReasonRefNotPermitted)
			continue
		}
		// The ReferenceGrant first: a Gateway owner learns nothing of
		// another namespace's Secrets without one (istiod looks the Secret
		// up first).
		switch t.in.Secret(ns, string(ref.Name)) {
		case CertificateMissing:
			problems = append(problems, fmt.Sprintf("certificateRefs[%d]: Secret %s/%s not found", i, ns, ref.Name))
			continue
		case CertificateInvalid:
			problems = append(problems, fmt.Sprintf("certificateRefs[%d]: Secret %s/%s holds no valid certificate and key (tls.crt, tls.key)", i, ns, ref.Name))
			continue
		}
		if ns == g.obj.Namespace {
			creds = append(creds, string(ref.Name))
		} else {
			// istiod: kubernetes-gateway://ns/name, checked again against
			// the ReferenceGrants when SDS serves it.
			creds = append(creds, ns+"/"+string(ref.Name))
		}
	}
	if len(creds) == 0 {
		if len(problems) == 0 {
			problems = []string{"no certificateRefs"}
		}
		return nil, false, reason, strings.Join(problems, "; ")
	}
	if len(creds) > 1 {
		g.unsupported(field+".certificateRefs", "only the first usable certificate is served")
	}
	tls = &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: creds[0]}
	if len(problems) > 0 {
		return tls, false, reason, strings.Join(problems, "; ")
	}
	return tls, true, "", ""
}
