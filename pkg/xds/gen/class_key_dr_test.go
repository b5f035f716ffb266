package gen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func TestClassKeyDestinationRuleWorkloadSelector(t *testing.T) {
	w := loadWorld(t, drWorld).World()
	type lbl = map[string]string
	tests := map[string]struct {
		ns   string
		a, b lbl
		same bool
	}{
		"a rule selecting the proxy splits its class from its namespace's":   {ns: "default", a: lbl{"app": "productpage"}, b: lbl{"app": "details"}},
		"proxies no rule selects share the class":                            {ns: "default", a: lbl{"app": "details"}, b: nil, same: true},
		"labels beside the selected ones do not matter":                      {ns: "default", a: lbl{"app": "productpage", "v": "1"}, b: lbl{"app": "productpage", "v": "2"}, same: true},
		"two rules selecting differ from one":                                {ns: "default", a: lbl{"app": "productpage", "tier": "batch"}, b: lbl{"app": "productpage"}},
		"a rule of another namespace does not select, whatever its exportTo": {ns: "fourth", a: lbl{"app": "productpage"}, b: nil, same: true},
		"a rule selects in its own namespace":                                {ns: "other", a: lbl{"app": "productpage", "tier": "batch"}, b: lbl{"tier": "batch"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, b := ClassKey(w, labelled(t, "sidecar", tc.ns, tc.a)), ClassKey(w, labelled(t, "sidecar", tc.ns, tc.b))
			if (a == b) != tc.same {
				t.Errorf("keys %q and %q: same=%v, want %v", a, b, a == b, tc.same)
			}
		})
	}
	plain := labelled(t, "sidecar", "default", map[string]string{"app": "details"})
	if got := ClassKey(w, plain); got != plain.Class() {
		t.Errorf("a proxy no rule selects has key %q, want its class %q", got, plain.Class())
	}
	pp := labelled(t, "sidecar", "default", map[string]string{"app": "productpage"})
	if got := ClassKey(w, pp); !strings.Contains(got, "|dr=") {
		t.Errorf("a selected proxy's key %q does not name its rules", got)
	}
	gw := labelled(t, "router", "default", map[string]string{"app": "productpage"})
	if got := ClassKey(w, gw); got != gw.Class() {
		t.Errorf("a gateway's key is %q, want its class %q (its labels are in it already)", got, gw.Class())
	}
}

// TestClassKeyFollowsDestinationRuleSelectors: a rule that starts to
// select a proxy changes its key; an edit that selects the same proxies
// leaves it (the push re-sends the class then, push.go).
func TestClassKeyFollowsDestinationRuleSelectors(t *testing.T) {
	s := loadWorld(t, drWorld)
	p := labelled(t, "sidecar", "default", map[string]string{"app": "details"})
	before := ClassKey(s.World(), p)
	rule := func(app, lb string) string {
		return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: details-selected, namespace: default}
spec:
  host: details
  workloadSelector: {matchLabels: {app: %s}}
  trafficPolicy: {loadBalancer: {simple: %s}}
`, app, lb)
	}
	apply := func(y string) {
		t.Helper()
		evs, err := worldtest.Decode([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(evs...); err != nil {
			t.Fatal(err)
		}
	}
	apply(rule("details", "RANDOM"))
	selected := ClassKey(s.World(), p)
	if selected == before {
		t.Fatalf("a rule selecting the proxy left its key at %q", before)
	}
	apply(rule("details", "LEAST_REQUEST"))
	if got := ClassKey(s.World(), p); got != selected {
		t.Errorf("an edit selecting the same proxies changed the key: %q -> %q", selected, got)
	}
	apply(rule("nobody", "LEAST_REQUEST"))
	if got := ClassKey(s.World(), p); got != before {
		t.Errorf("a rule that no longer selects the proxy left the key at %q, want %q", got, before)
	}
}

// TestEqualClassKeysGetEqualConfigurationWithDestinationRules generates
// the class of proxies with many label sets in drWorld: equal keys must
// mean identical configuration.
func TestEqualClassKeysGetEqualConfigurationWithDestinationRules(t *testing.T) {
	w := loadWorld(t, drWorld).World()
	g := newForTest(quietLog())
	byKey := map[string]string{}
	for _, ns := range []string{"default", "other", "fourth"} {
		for _, app := range []string{"", "productpage", "details"} {
			for _, tier := range []string{"", "batch", "web"} {
				labels := map[string]string{"version": "v1"}
				if app != "" {
					labels["app"] = app
				}
				if tier != "" {
					labels["tier"] = tier
				}
				p := labelled(t, "sidecar", ns, labels)
				cc, err := g.Class(w, p, nil)
				if err != nil {
					t.Fatal(err)
				}
				var b strings.Builder
				for _, typ := range TypeURLs {
					fmt.Fprintf(&b, "%s=%s;", ShortType(typ), cc.Sets[typ].Version)
				}
				k := ClassKey(w, p)
				if prev, ok := byKey[k]; ok && prev != b.String() {
					t.Errorf("labels %v in %s: key %q seen with configuration %s, now %s", labels, ns, k, prev, b.String())
				}
				byKey[k] = b.String()
			}
		}
	}
	pp := ClassKey(w, labelled(t, "sidecar", "default", map[string]string{"app": "productpage", "version": "v1"}))
	plain := ClassKey(w, labelled(t, "sidecar", "default", map[string]string{"app": "details", "version": "v1"}))
	if byKey[pp] == byKey[plain] {
		t.Errorf("the selecting rule (subset v2) should change the configuration: %s", byKey[pp])
	}
}
