package gen

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// efBrokenForReviews breaks, for the reviews workloads only, the reviews
// cluster (a connect timeout Envoy refuses) and merges a valid timeout
// into productpage's.
const efBrokenForReviews = `
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: broken, namespace: default, resourceVersion: "7", generation: 2}
spec:
  workloadSelector: {labels: {app: reviews}}
  configPatches:
  - applyTo: CLUSTER
    match: {context: SIDECAR_OUTBOUND, cluster: {service: reviews.default.svc.cluster.local}}
    patch: {operation: MERGE, value: {connect_timeout: -1s}}
  - applyTo: CLUSTER
    match: {context: SIDECAR_OUTBOUND, cluster: {service: productpage.default.svc.cluster.local, portNumber: 9080}}
    patch: {operation: MERGE, value: {connect_timeout: 7s}}
`

// Issue 18: an EnvoyFilter whose patch makes an invalid resource: that
// resource is not sent patched, the EnvoyFilter's refusal is recorded
// for its status (at its generation, and the status writer is told), and
// nothing else is affected: the other patch applies, and a proxy the
// EnvoyFilter does not select gets exactly what it got without it. No good
// patched form of the cluster was ever made, so it is sent as generated
// (TestEnvoyFilterRefusalKeepsTheLastGoodPatch has the other case).
func TestEnvoyFilterRefusalIsRecordedForStatusAndContained(t *testing.T) {
	before := loadWorld(t, efBase).World()
	after := loadWorld(t, efBase+efBrokenForReviews).World()
	g, _ := efGen(t)
	var mu sync.Mutex
	var told []string
	g.OnEnvoyFilterRefused(func(ns, name string) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, ns+"/"+name)
	})
	selected := labelled(t, "sidecar", "default", map[string]string{"app": "reviews"})
	other := labelled(t, "sidecar", "default", map[string]string{"app": "other"})

	sameConfig(t, "a proxy the EnvoyFilter does not select", efGenerate(t, g, after, other), efGenerate(t, g, before, other))
	if _, ok := g.EnvoyFilterRefused("default", "broken", 2, ""); ok {
		t.Fatal("a refusal is recorded before any proxy it selects was generated for")
	}

	patched, plain := efGenerate(t, g, after, selected), efGenerate(t, g, before, selected)
	const bad = "outbound|9080||reviews.default.svc.cluster.local"
	if !bytes.Equal(patched.Get(ClusterType, bad).Any.GetValue(), plain.Get(ClusterType, bad).Any.GetValue()) {
		t.Error("the cluster whose patch is invalid was not sent as generated")
	}
	msg, ok := g.EnvoyFilterRefused("default", "broken", 2, "")
	if !ok || !strings.Contains(msg, bad) || !strings.Contains(msg, "ConnectTimeout") {
		t.Errorf("refusal %q, %v: want the cluster and Envoy's rule", msg, ok)
	}
	if _, ok := g.EnvoyFilterRefused("default", "broken", 3, ""); ok {
		t.Error("the refusal is reported for a generation it was not made at")
	}
	if _, ok := g.EnvoyFilterRefused("default", "other", 2, ""); ok {
		t.Error("the refusal is reported for another EnvoyFilter")
	}
	mu.Lock()
	if strings.Join(told, ",") != "default/broken" {
		t.Errorf("status writer told %v, want default/broken once", told)
	}
	mu.Unlock()

	// The same refusal again (the next push) tells nobody anything new.
	efGenerate(t, g, loadWorld(t, efBase+efBrokenForReviews).World(), selected)
	mu.Lock()
	if len(told) != 1 {
		t.Errorf("status writer told %v after the same refusal again", told)
	}
	mu.Unlock()
}

// In file mode there is no generation: the refusal is keyed by the
// resourceVersion.
func TestEnvoyFilterRefusalWithoutGenerationIsKeyedByResourceVersion(t *testing.T) {
	w := loadWorld(t, efBase+strings.Replace(efBrokenForReviews, ", generation: 2", "", 1)).World()
	g, _ := efGen(t)
	efGenerate(t, g, w, labelled(t, "sidecar", "default", map[string]string{"app": "reviews"}))
	if _, ok := g.EnvoyFilterRefused("default", "broken", 0, "7"); !ok {
		t.Error("no refusal at resourceVersion 7")
	}
	if _, ok := g.EnvoyFilterRefused("default", "broken", 0, "8"); ok {
		t.Error("a refusal at resourceVersion 8")
	}
}

// efGoodForReviews is efBrokenForReviews' earlier, valid version.
var efGoodForReviews = strings.Replace(strings.Replace(efBrokenForReviews, "connect_timeout: -1s", "connect_timeout: 3s", 1),
	`resourceVersion: "7", generation: 2`, `resourceVersion: "6", generation: 1`, 1)

// Issue 18, "the last good one stays": an edit that breaks an
// EnvoyFilter's patch leaves the proxies the resource as its last good
// version patched it, while generation builds the same resource; once
// what the patch applies to changes, the old patched form may be stale,
// and the resource is sent as built.
func TestEnvoyFilterRefusalKeepsTheLastGoodPatch(t *testing.T) {
	g, _ := efGen(t)
	selected := labelled(t, "sidecar", "default", map[string]string{"app": "reviews"})
	const bad = "outbound|9080||reviews.default.svc.cluster.local"
	good := efGenerate(t, g, loadWorld(t, efBase+efGoodForReviews).World(), selected)
	if !strings.Contains(clusterJSON(t, good, bad), `"connectTimeout":"3s"`) {
		t.Fatalf("the good version was not applied: %s", clusterJSON(t, good, bad))
	}
	broken := efGenerate(t, g, loadWorld(t, efBase+efBrokenForReviews).World(), selected)
	if !bytes.Equal(broken.Get(ClusterType, bad).Any.GetValue(), good.Get(ClusterType, bad).Any.GetValue()) {
		t.Errorf("the broken version did not keep the last good cluster: %s", clusterJSON(t, broken, bad))
	}
	if _, ok := g.EnvoyFilterRefused("default", "broken", 2, ""); !ok {
		t.Error("the refusal is not recorded")
	}

	// What the patch applies to changes: a DestinationRule for reviews.
	const dr = `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec: {host: reviews.default.svc.cluster.local, trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}}
`
	plain := efGenerate(t, efGenNoLog(t), loadWorld(t, efBase+dr).World(), selected)
	changed := efGenerate(t, g, loadWorld(t, efBase+dr+efBrokenForReviews).World(), selected)
	if !bytes.Equal(changed.Get(ClusterType, bad).Any.GetValue(), plain.Get(ClusterType, bad).Any.GetValue()) {
		t.Errorf("with the cluster rebuilt, the stale patched form was kept: %s", clusterJSON(t, changed, bad))
	}
}

func efGenNoLog(t *testing.T) *Generator {
	t.Helper()
	g, _ := efGen(t)
	return g
}

func clusterJSON(t *testing.T, pc *ProxyConfig, name string) string {
	t.Helper()
	r := pc.Get(ClusterType, name)
	if r == nil {
		t.Fatalf("no cluster %s", name)
	}
	c := &clusterv3.Cluster{}
	if err := r.Any.UnmarshalTo(c); err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), " ", "")
}
