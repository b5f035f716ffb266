package status

import (
	"context"
	"strings"
	"sync"
	"testing"

	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// fakeRefusals is a PatchRefusals: one refusal per EnvoyFilter, at a
// generation.
type fakeRefusals struct {
	mu  sync.Mutex
	gen map[string]int64
	msg map[string]string
}

func (f *fakeRefusals) set(ns, name string, gen int64, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen == nil {
		f.gen, f.msg = map[string]int64{}, map[string]string{}
	}
	f.gen[ns+"/"+name], f.msg[ns+"/"+name] = gen, msg
}

func (f *fakeRefusals) EnvoyFilterRefused(ns, name string, gen int64, _ string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.gen[ns+"/"+name]
	return f.msg[ns+"/"+name], ok && g == gen
}

// envoyFilter is EnvoyFilter shop/name at generation gen, its status kept
// from the store as the API server keeps it.
func envoyFilter(s *model.Store, name string, gen int64) *networkingv1alpha3.EnvoyFilter {
	ef := &networkingv1alpha3.EnvoyFilter{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Generation: gen, ResourceVersion: strings.Repeat("1", int(gen))}}
	ef.Spec.ConfigPatches = []*networkingapi.EnvoyFilter_EnvoyConfigObjectPatch{{
		ApplyTo: networkingapi.EnvoyFilter_CLUSTER,
		Patch:   &networkingapi.EnvoyFilter_Patch{Operation: networkingapi.EnvoyFilter_Patch_MERGE},
	}}
	ef.Spec.Priority = int32(gen)
	if cur := s.World().Config(model.KindEnvoyFilter, "shop", name); cur != nil {
		ef.Status = *cur.Object.(*networkingv1alpha3.EnvoyFilter).Status.DeepCopy()
	}
	return ef
}

func patchRefusedIn(s *model.Store, name string) string {
	c := s.World().Config(model.KindEnvoyFilter, "shop", name)
	if c == nil {
		return ""
	}
	for _, x := range conditionsOf(c.Object) {
		if x.GetType() == PatchRefusedConditionType {
			return x.GetReason() + ": " + x.GetMessage()
		}
	}
	return ""
}

// An EnvoyFilter whose patch generation refused carries the PatchRefused
// condition with generation's error, through the status write that bumps
// its resourceVersion, until a new generation of it is not refused; an
// EnvoyFilter generation did not refuse never gets one.
func TestLeadReportsRefusedEnvoyFilterPatches(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	upsert(t, store, envoyFilter(store, "broken", 1), envoyFilter(store, "fine", 1))
	fs := &fakeSetter{store: store}
	a, _, _ := newAuditor(t, store, fs)
	refusals := &fakeRefusals{}
	a.SetPatchRefusals(refusals)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Start(ctx) })
	led := make(chan struct{})
	go func() { _ = a.Lead(ctx); close(led) }()
	t.Cleanup(func() { cancel(); <-led; wg.Wait() })

	const msg = "Cluster outbound|9080||reviews.default.svc.cluster.local: invalid Cluster.ConnectTimeout: value must be greater than 0s"
	refusals.set("shop", "broken", 1, msg)
	a.NotePatchRefused("shop", "broken")
	waitFor(t, "the PatchRefused condition", func() bool { return patchRefusedIn(store, "broken") != "" })
	if got := patchRefusedIn(store, "broken"); !strings.HasPrefix(got, ReasonPatchedResourceInvalid+": ") || !strings.Contains(got, msg) {
		t.Errorf("condition %q does not carry generation's error", got)
	}

	upsert(t, store, envoyFilter(store, "broken", 2))
	waitFor(t, "the PatchRefused condition cleared", func() bool { return patchRefusedIn(store, "broken") == "" })
	var calls []string
	for _, c := range fs.all() {
		if c.typ != PatchRefusedConditionType {
			continue
		}
		if c.key.Name != "broken" {
			t.Errorf("a PatchRefused condition was written on %s", c.key)
		}
		calls = append(calls, map[bool]string{true: "set", false: "clear"}[c.c != nil])
	}
	// One write each way: the status write (a new resourceVersion, the
	// same generation) did not clear the condition.
	if strings.Join(calls, ",") != "set,clear" {
		t.Errorf("PatchRefused writes %v, want set,clear", calls)
	}
}
