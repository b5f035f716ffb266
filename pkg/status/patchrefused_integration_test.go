package status

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"
	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// TestIntegrationEnvoyFilterPatchRefusedInStatus runs generation and the
// Auditor against a real API server (issue 18): an EnvoyFilter whose
// patch makes a cluster Envoy refuses gets the PatchRefused condition
// with the error; that cluster is sent as generated (no good patched
// form of it was ever made), the filter's valid
// patch still applies, and a proxy the filter does not select gets
// byte-identical configuration. Fixing the patch clears the condition.
func TestIntegrationEnvoyFilterPatchRefusedInStatus(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	kubetest.InstallCRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config), model.KindEnvoyFilter)
	istio := istioclient.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	c := env.Client.CoreV1()
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"reviews", "productpage"} {
		if _, err := c.Services("shop").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	g, err := gen.New(gen.DefaultOptions(log))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuditor(DefaultOptions(), store.World, NewKubeWriter(dyn, env.Client), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a.SetPatchRefusals(g)
	g.OnEnvoyFilterRefused(a.NotePatchRefused)
	store.Subscribe(a.Observe)
	background(t, func(ctx context.Context) error { return src.Start(ctx, store) })
	background(t, a.Start)
	background(t, a.Lead)
	// The World before the EnvoyFilter is the synced one: a kind listed
	// after it was taken would change it too.
	poll(t, "the source synced, both Services in the World", 30*time.Second, func() (bool, string) {
		return src.HasSynced() && len(store.World().Services()) >= 2, "not yet"
	})

	selected, other := sidecar(t, "reviews"), sidecar(t, "ratings")
	before := store.World()
	otherBefore, selectedBefore := generate(t, g, before, other), generate(t, g, before, selected)

	const bad, good = "outbound|9080||reviews.shop.svc.cluster.local", "outbound|9080||productpage.shop.svc.cluster.local"
	efClient := istio.NetworkingV1alpha3().EnvoyFilters("shop")
	ef := &networkingv1alpha3.EnvoyFilter{ObjectMeta: metav1.ObjectMeta{Name: "timeouts", Namespace: "shop"}}
	ef.Spec.WorkloadSelector = &networkingapi.WorkloadSelector{Labels: map[string]string{"app": "reviews"}}
	ef.Spec.ConfigPatches = []*networkingapi.EnvoyFilter_EnvoyConfigObjectPatch{
		clusterPatch("reviews.shop.svc.cluster.local", "-1s"),
		clusterPatch("productpage.shop.svc.cluster.local", "7s"),
	}
	if _, err := efClient.Create(ctx, ef, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the EnvoyFilter in the World", 30*time.Second, func() (bool, string) {
		return store.World().Config(model.KindEnvoyFilter, "shop", "timeouts") != nil, "not yet"
	})
	after := store.World()
	if d := differs(otherBefore, generate(t, g, after, other)); d != "" {
		t.Errorf("a proxy the EnvoyFilter does not select got other configuration: %s (World %d, then %d)", d, before.Version, after.Version)
	}
	patched := generate(t, g, after, selected)
	if !bytes.Equal(patched.Get(gen.ClusterType, bad).Any.GetValue(), selectedBefore.Get(gen.ClusterType, bad).Any.GetValue()) {
		t.Error("the cluster whose patch Envoy refuses was not sent as generated")
	}
	if bytes.Equal(patched.Get(gen.ClusterType, good).Any.GetValue(), selectedBefore.Get(gen.ClusterType, good).Any.GetValue()) {
		t.Error("the EnvoyFilter's valid patch was not applied")
	}

	condition := func() (map[string]any, error) {
		u, err := dyn.Resource(model.KindEnvoyFilter.GroupVersionResource()).Namespace("shop").Get(ctx, "timeouts", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		conds, _, err := unstructuredConditions(u.Object)
		for _, c := range conds {
			if c["type"] == PatchRefusedConditionType {
				return c, err
			}
		}
		return nil, err
	}
	poll(t, "the PatchRefused condition naming the cluster", 30*time.Second, func() (bool, string) {
		c, err := condition()
		if err != nil {
			return false, err.Error()
		}
		msg, _ := c["message"].(string)
		return c["status"] == "True" && c["reason"] == ReasonPatchedResourceInvalid && strings.Contains(msg, bad) &&
			c["observedGeneration"] == int64(1), msg
	})

	// Fixed: the next generation refuses nothing and the condition goes.
	cur, err := efClient.Get(ctx, "timeouts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.ConfigPatches[0] = clusterPatch("reviews.shop.svc.cluster.local", "5s")
	if _, err := efClient.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "generation 2 of the EnvoyFilter in the World", 30*time.Second, func() (bool, string) {
		c := store.World().Config(model.KindEnvoyFilter, "shop", "timeouts")
		return c != nil && c.Object.(*networkingv1alpha3.EnvoyFilter).Generation == 2, "not yet"
	})
	generate(t, g, store.World(), selected)
	poll(t, "the PatchRefused condition gone", 30*time.Second, func() (bool, string) {
		c, err := condition()
		if err != nil {
			return false, err.Error()
		}
		return c == nil, "still there"
	})
}

func clusterPatch(service, timeout string) *networkingapi.EnvoyFilter_EnvoyConfigObjectPatch {
	v, _ := structpb.NewStruct(map[string]any{"connect_timeout": timeout})
	return &networkingapi.EnvoyFilter_EnvoyConfigObjectPatch{
		ApplyTo: networkingapi.EnvoyFilter_CLUSTER,
		Match: &networkingapi.EnvoyFilter_EnvoyConfigObjectMatch{
			Context: networkingapi.EnvoyFilter_SIDECAR_OUTBOUND,
			ObjectTypes: &networkingapi.EnvoyFilter_EnvoyConfigObjectMatch_Cluster{
				Cluster: &networkingapi.EnvoyFilter_ClusterMatch{Service: service, PortNumber: 9080},
			},
		},
		Patch: &networkingapi.EnvoyFilter_Patch{Operation: networkingapi.EnvoyFilter_Patch_MERGE, Value: v},
	}
}

func sidecar(t *testing.T, app string) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy("sidecar~10.0.0.9~"+app+".shop~shop.svc.cluster.local",
		map[string]any{model.MetaIstioVersion: "1.32.0", model.MetaLabels: map[string]any{"app": app}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func generate(t *testing.T, g *gen.Generator, w *model.World, p *model.Proxy) *gen.ProxyConfig {
	t.Helper()
	cc, err := g.Class(w, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g.Proxy(w, p, cc)
}

// differs describes the first resource a and b do not hold alike, byte
// for byte ("" when they hold the same).
func differs(a, b *gen.ProxyConfig) string {
	for _, typ := range gen.TypeURLs {
		an, bn := a.Names(typ), b.Names(typ)
		if strings.Join(an, ",") != strings.Join(bn, ",") {
			return fmt.Sprintf("%s names %v, then %v", gen.ShortType(typ), an, bn)
		}
		for _, n := range an {
			if !bytes.Equal(a.Get(typ, n).Wire().GetValue(), b.Get(typ, n).Wire().GetValue()) {
				return fmt.Sprintf("%s %s", gen.ShortType(typ), n)
			}
		}
	}
	return ""
}
