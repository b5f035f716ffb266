package status

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"
	securityapi "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

// TestIntegrationUnsupportedFieldsInStatus runs the Auditor against a real
// API server: a VirtualService that sets a field discovery ignores gets
// the condition (beside a condition someone else wrote, which stays), and
// loses it when the field is removed; a RequestAuthentication setting
// presence (which discovery, like istiod, does not act on) gets one too.
func TestIntegrationUnsupportedFieldsInStatus(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	kubetest.InstallCRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config), model.KindVirtualService, model.KindRequestAuthentication)
	istio := istioclient.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vsClient := istio.NetworkingV1().VirtualServices("shop")
	vs := virtualService("reviews", 0, true)
	vs.ResourceVersion = ""
	vs, err := vsClient.Create(ctx, vs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Someone else's condition, written before ours.
	vs.Status.Conditions = append(vs.Status.Conditions, cond("example.com/Reconciled", "True", "Done", "by another controller", vs.Generation))
	if _, err := vsClient.UpdateStatus(ctx, vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ra := &securityv1.RequestAuthentication{
		ObjectMeta: metav1.ObjectMeta{Name: "jwt", Namespace: "shop"},
		Spec:       securityapi.RequestAuthentication{JwtRules: []*securityapi.JWTRule{{Issuer: "https://issuer.example", Presence: securityapi.JWTRule_REQUIRED}}},
	}
	if _, err := istio.SecurityV1().RequestAuthentications("shop").Create(ctx, ra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuditor(DefaultOptions(), store.World, NewKubeWriter(dyn, env.Client), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store.Subscribe(a.Observe)
	background(t, func(ctx context.Context) error { return src.Start(ctx, store) })
	background(t, a.Start)
	background(t, a.Lead)

	conditions := func(kind model.Kind, name string) (map[string]map[string]any, error) {
		u, err := dyn.Resource(kind.GroupVersionResource()).Namespace("shop").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		out := map[string]map[string]any{}
		for _, x := range list {
			if m, ok := x.(map[string]any); ok {
				out[m["type"].(string)] = m
			}
		}
		return out, nil
	}
	poll(t, "the condition naming the ignored field on the VirtualService", 30*time.Second, func() (bool, string) {
		cs, err := conditions(model.KindVirtualService, "reviews")
		if err != nil {
			return false, err.Error()
		}
		c := cs[UnsupportedConditionType]
		msg, _ := c["message"].(string)
		return c["status"] == "True" && c["reason"] == ReasonFieldsNotSupported && strings.Contains(msg, ignoredField) &&
			cs["example.com/Reconciled"] != nil, strings.Join(keys(cs), ",") + " " + msg
	})
	poll(t, "the condition naming presence on the RequestAuthentication", 30*time.Second, func() (bool, string) {
		cs, err := conditions(model.KindRequestAuthentication, "jwt")
		if err != nil {
			return false, err.Error()
		}
		c := cs[UnsupportedConditionType]
		msg, _ := c["message"].(string)
		return c["reason"] == ReasonFieldsNotSupported && strings.Contains(msg, "spec.jwtRules[].presence"), msg
	})

	// The field removed: the condition goes, the other one stays.
	cur, err := vsClient.Get(ctx, "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Http[0].Retries.RetryRemoteLocalities = nil
	cur.Spec.Http[0].Retries.Attempts = 3
	if _, err := vsClient.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the condition gone once the field is removed", 30*time.Second, func() (bool, string) {
		cs, err := conditions(model.KindVirtualService, "reviews")
		if err != nil {
			return false, err.Error()
		}
		return cs[UnsupportedConditionType] == nil && cs["example.com/Reconciled"] != nil, strings.Join(keys(cs), ",")
	})
	// And back when the field returns.
	cur, err = vsClient.Get(ctx, "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Http[0].Retries.RetryRemoteLocalities = wrapperspb.Bool(true)
	if _, err := vsClient.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the condition back at generation 3", 30*time.Second, func() (bool, string) {
		cs, err := conditions(model.KindVirtualService, "reviews")
		if err != nil {
			return false, err.Error()
		}
		c := cs[UnsupportedConditionType]
		return c != nil && c["observedGeneration"] == int64(3), strings.Join(keys(cs), ",")
	})
	// The API server shows a write before the Auditor has counted it.
	poll(t, "the writes counted", 10*time.Second, func() (bool, string) {
		set, cleared := testutil.ToFloat64(a.m.writes.WithLabelValues(OutcomeSet)), testutil.ToFloat64(a.m.writes.WithLabelValues(OutcomeCleared))
		return set == 3 && cleared == 1, fmt.Sprintf("writes: %v set, %v cleared; want 3 (VirtualService twice, RequestAuthentication) and 1", set, cleared)
	})
}

func keys(m map[string]map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
