package gen

import (
	"fmt"
	"strings"

	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// routeDeps names, by object identity, everything the routes of a host
// with VirtualServices vss are built from: the VirtualServices, the
// VirtualServices they delegate to, and the Service and DestinationRule of
// every host they send traffic to (a destination's port and subsets come
// from those). The World replaces an object when it changes, so equal deps
// mean equal routes.
func routeDeps(sc *Scope, vss []*model.Config) string {
	var b strings.Builder
	seen := map[string]bool{}
	dest := func(ns string, d *networking.Destination) {
		if d == nil {
			return
		}
		h := ResolveHost(d.GetHost(), ns, sc.w.DomainSuffix)
		if seen[h] {
			return
		}
		seen[h] = true
		fmt.Fprintf(&b, "%s=%p/%p;", h, sc.w.ServiceByHost(h), sc.destinationRuleConfig(h))
	}
	var walk func(c *model.Config, depth int)
	walk = func(c *model.Config, depth int) {
		fmt.Fprintf(&b, "%p;", c)
		vs, ok := c.Object.(*networkingv1.VirtualService)
		if !ok {
			return
		}
		ns := c.Key.Namespace
		for _, hr := range vs.Spec.GetHttp() {
			for _, rd := range hr.GetRoute() {
				dest(ns, rd.GetDestination())
			}
			dest(ns, hr.GetMirror())
			for _, m := range hr.GetMirrors() {
				dest(ns, m.GetDestination())
			}
			if d := hr.GetDelegate(); d != nil && depth == 0 {
				dns := d.GetNamespace()
				if dns == "" {
					dns = ns
				}
				if dc := sc.w.Config(model.KindVirtualService, dns, d.GetName()); dc != nil {
					walk(dc, depth+1)
				} else {
					fmt.Fprintf(&b, "missing:%s/%s;", dns, d.GetName())
				}
			}
		}
		for _, tr := range vs.Spec.GetTcp() {
			for _, rd := range tr.GetRoute() {
				dest(ns, rd.GetDestination())
			}
		}
		for _, tr := range vs.Spec.GetTls() {
			for _, rd := range tr.GetRoute() {
				dest(ns, rd.GetDestination())
			}
		}
	}
	for _, c := range vss {
		walk(c, 0)
	}
	return b.String()
}
