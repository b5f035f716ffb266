package gen

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshplane/discovery/pkg/model"
)

// drWorld has DestinationRules at every level Istio looks at: the
// proxy's namespace (with and without workloadSelector), the service's
// namespace and the root namespace, and a namespace that is neither.
const drWorld = `apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.96.0.11
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: details, namespace: default}
spec:
  clusterIP: 10.96.0.12
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: ratings, namespace: other}
spec:
  clusterIP: 10.96.1.11
  ports: [{name: http, port: 9080}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews-all, namespace: default, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  host: reviews
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews-pp, namespace: default, creationTimestamp: "2024-02-01T00:00:00Z"}
spec:
  host: reviews
  workloadSelector: {matchLabels: {app: productpage}}
  exportTo: ["*"]
  subsets: [{name: v2, labels: {version: v2}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews-pp-late, namespace: default, creationTimestamp: "2024-03-01T00:00:00Z"}
spec:
  host: reviews
  workloadSelector: {matchLabels: {app: productpage}}
  subsets: [{name: v3, labels: {version: v3}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings, namespace: other, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  host: ratings.other.svc.cluster.local
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings-batch, namespace: default, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  host: ratings.other.svc.cluster.local
  workloadSelector: {matchLabels: {tier: batch}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings-private, namespace: other, creationTimestamp: "2023-01-01T00:00:00Z"}
spec:
  host: ratings.other.svc.cluster.local
  exportTo: ["."]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: details-root, namespace: istio-system, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  host: details.default.svc.cluster.local
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews-third, namespace: third, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  host: reviews.default.svc.cluster.local
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: details-other-selected, namespace: other, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  host: details.default.svc.cluster.local
  workloadSelector: {matchLabels: {app: productpage}}
  exportTo: ["*"]
`

func TestDestinationRuleSelection(t *testing.T) {
	w := loadWorld(t, drWorld).World()
	type lbl = map[string]string
	const (
		reviews = "reviews.default.svc.cluster.local"
		details = "details.default.svc.cluster.local"
		ratings = "ratings.other.svc.cluster.local"
	)
	tests := map[string]struct {
		typ, ns string
		labels  lbl
		host    string
		want    string // namespace/name, "" for none
	}{
		"a rule whose workloadSelector selects the proxy wins over its namespace's rule": {
			ns: "default", labels: lbl{"app": "productpage"}, host: reviews, want: "default/reviews-pp",
		},
		"a proxy the selector does not select gets its namespace's rule": {
			ns: "default", labels: lbl{"app": "details"}, host: reviews, want: "default/reviews-all",
		},
		"a proxy without labels gets its namespace's rule": {
			ns: "default", host: reviews, want: "default/reviews-all",
		},
		"a rule with a workloadSelector does not leave its namespace, whatever its exportTo": {
			ns: "fourth", labels: lbl{"app": "productpage"}, host: reviews, want: "default/reviews-all",
		},
		"a gateway is selected by its labels too": {
			typ: "router", ns: "default", labels: lbl{"app": "productpage"}, host: reviews, want: "default/reviews-pp",
		},
		"a selected proxy gets the selecting rule for a host of another namespace": {
			ns: "default", labels: lbl{"tier": "batch"}, host: ratings, want: "default/ratings-batch",
		},
		"an unselected proxy falls through to the rule the service's namespace exports": {
			ns: "default", labels: lbl{"tier": "web"}, host: ratings, want: "other/ratings",
		},
		"the service's namespace's private rule applies there only": {
			ns: "other", host: ratings, want: "other/ratings-private",
		},
		"the root namespace's rule applies where neither the proxy's nor the service's namespace has one": {
			ns: "default", host: details, want: "istio-system/details-root",
		},
		"a rule of a namespace that is neither the proxy's, the service's nor the root's does not apply": {
			ns: "fourth", host: details, want: "istio-system/details-root",
		},
		"the proxy's namespace's rule comes before the service's namespace's": {
			ns: "third", host: reviews, want: "third/reviews-third",
		},
		"a selecting rule of another namespace does not apply even to labels it matches": {
			ns: "default", labels: lbl{"app": "productpage"}, host: details, want: "istio-system/details-root",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			typ := tc.typ
			if typ == "" {
				typ = "sidecar"
			}
			sc := scopeOf(w, labelled(t, typ, tc.ns, tc.labels))
			got := ""
			if c := sc.destinationRuleConfig(tc.host); c != nil {
				got = c.Key.Namespace + "/" + c.Key.Name
			}
			if got != tc.want {
				t.Errorf("DestinationRule of %s for a %s of %s %v: %q, want %q", tc.host, typ, tc.ns, tc.labels, got, tc.want)
			}
		})
	}
}

// TestShadowedDestinationRuleIsReported: of two rules that select the
// same proxy for one host the oldest applies (Istio merges rules with
// equal selectors); the other is reported, once.
func TestShadowedDestinationRuleIsReported(t *testing.T) {
	w := loadWorld(t, drWorld).World()
	var logs bytes.Buffer
	g := newForTest(slog.New(slog.NewTextHandler(&logs, nil)))
	p := labelled(t, "sidecar", "default", map[string]string{"app": "productpage"})
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Sets[ClusterType].Get("outbound|9080|v2|reviews.default.svc.cluster.local") == nil ||
		cc.Sets[ClusterType].Get("outbound|9080|v3|reviews.default.svc.cluster.local") != nil {
		t.Errorf("want the subsets of default/reviews-pp only: %v", cc.Sets[ClusterType].Names)
	}
	if n := strings.Count(logs.String(), "default/reviews-pp-late"); n != 1 {
		t.Errorf("the shadowed rule is reported %d times, want once:\n%s", n, logs.String())
	}
	if _, err := g.Class(w, labelled(t, "sidecar", "default", map[string]string{"app": "productpage", "v": "2"}), nil); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "default/reviews-pp-late"); n != 1 {
		t.Errorf("reported again for another class: %d times", n)
	}
}

func TestDestinationRuleWorkloadSelectorIsSupported(t *testing.T) {
	dr := &networking.DestinationRule{
		Host:             "reviews",
		WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "productpage"}},
	}
	if got := UnsupportedFields(model.KindDestinationRule, dr); len(got) != 0 {
		t.Errorf("unsupported fields %v, want none", got)
	}
}
