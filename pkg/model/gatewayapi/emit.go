package gatewayapi

import (
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cloneRoute(r *networking.HTTPRoute) *networking.HTTPRoute {
	return proto.Clone(r).(*networking.HTTPRoute)
}

// virtualServices emits one VirtualService per (listener, host), named as
// istiod names its merged ones (namespace~gateway~host), in the oldest
// route's namespace, bound to the listener's Istio Gateway.
func (t *translator) virtualServices() {
	sort.Slice(t.bucketIDs, func(i, j int) bool {
		a, b := t.bucketIDs[i], t.bucketIDs[j]
		if a.listener != b.listener {
			return a.listener < b.listener
		}
		return a.host < b.host
	})
	for _, k := range t.bucketIDs {
		b := t.buckets[k]
		http := emitSorted(b.rules)
		var tls []*networking.TLSRoute
		for _, r := range b.tls {
			r = proto.Clone(r).(*networking.TLSRoute)
			r.Match = []*networking.TLSMatchAttributes{{SniHosts: []string{b.host}}}
			tls = append(tls, r)
		}
		from := append([]Ref{b.l.gw.ref}, b.from...)
		t.out.VirtualServices = append(t.out.VirtualServices, &networkingv1.VirtualService{
			ObjectMeta: metav1.ObjectMeta{
				Name:              strings.ReplaceAll(k.listener+"/"+k.host, "/", "~"),
				Namespace:         b.ns,
				CreationTimestamp: b.l.gw.obj.CreationTimestamp,
				Annotations:       map[string]string{AnnotationDerivedFrom: derivedFrom(from)},
			},
			Spec: networking.VirtualService{Hosts: []string{b.host}, Gateways: []string{b.l.istioName()}, Http: http, Tcp: b.tcp, Tls: tls},
		})
	}
	sort.Slice(t.out.Gateways, func(i, j int) bool {
		a, b := t.out.Gateways[i], t.out.Gateways[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

// emitSorted is the Istio routes of rules in the spec's precedence; rules
// is not reordered.
func emitSorted(rules []*rule) []*networking.HTTPRoute {
	rules = append([]*rule(nil), rules...)
	sortRules(rules)
	var http []*networking.HTTPRoute
	for _, r := range rules {
		http = append(http, r.emit()...)
	}
	return http
}

// emit writes the rule's Istio routes: itself, or for a path prefix the
// Exact match on it and the Prefix match on prefix + "/", each with its
// ReplacePrefixMatch ("/foo" -> "/bar": "/foo" becomes "/bar" and
// "/foo/x" becomes "/bar/x"; to "/": "/" and "/x").
func (r *rule) emit() []*networking.HTTPRoute {
	if r.prefix == "" {
		// The prefix "/" (ReplacePrefixMatch needs a PathPrefix match).
		apply(r.route, r.rewritePrefix, r.redirectPrefix, "/")
		return []*networking.HTTPRoute{r.route}
	}
	exact := cloneRoute(r.route)
	exact.Match[0].Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: r.prefix}}
	apply(exact, r.rewritePrefix, r.redirectPrefix, "")
	sub := cloneRoute(r.route)
	sub.Match[0].Uri = &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: r.prefix + "/"}}
	apply(sub, r.rewritePrefix, r.redirectPrefix, "/")
	return []*networking.HTTPRoute{exact, sub}
}

// apply sets a ReplacePrefixMatch on one emitted route; slash is "/" for
// the prefix + "/" half.
func apply(r *networking.HTTPRoute, rewritePrefix, redirectPrefix *string, slash string) {
	replace := func(p string) string {
		base := strings.TrimSuffix(p, "/")
		if slash == "" {
			if base == "" {
				return "/"
			}
			return base
		}
		return base + "/"
	}
	if rewritePrefix != nil && r.Rewrite != nil {
		r.Rewrite.Uri = replace(*rewritePrefix)
	}
	if redirectPrefix != nil && r.Redirect != nil {
		r.Redirect.PrefixRewrite = replace(*redirectPrefix)
	}
	if r.Rewrite != nil && proto.Equal(r.Rewrite, &networking.HTTPRewrite{}) {
		r.Rewrite = nil
	}
}

// sortRules orders rules by the spec's precedence, as istiod's
// sortHTTPRoutes: a rule without match last; then path Exact > Prefix >
// RegularExpression, longer first; a method match first; more header
// matches; more query matches. The sort is stable, so ties keep the
// routes' age and rule order.
func sortRules(rules []*rule) {
	sort.SliceStable(rules, func(i, j int) bool {
		ri, rj := rules[i].route, rules[j].route
		if len(ri.Match) == 0 {
			return false
		}
		if len(rj.Match) == 0 {
			return true
		}
		m1, m2 := ri.Match[0], rj.Match[0]
		r1, r2 := uriRank(m1), uriRank(m2)
		l1, l2 := uriLen(m1), uriLen(m2)
		switch {
		case r1 != r2:
			return r1 > r2
		case l1 != l2:
			return l1 > l2
		case (m1.Method == nil) != (m2.Method == nil):
			return m1.Method != nil
		case len(m1.Headers) != len(m2.Headers):
			return len(m1.Headers) > len(m2.Headers)
		default:
			return len(m1.QueryParams) > len(m2.QueryParams)
		}
	})
}

func uriRank(m *networking.HTTPMatchRequest) int {
	switch m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return 3
	case *networking.StringMatch_Prefix:
		return 2
	case *networking.StringMatch_Regex:
		return 1
	}
	return -1
}

func uriLen(m *networking.HTTPMatchRequest) int {
	u := m.GetUri()
	return len(u.GetExact()) + len(u.GetPrefix()) + len(u.GetRegex())
}
