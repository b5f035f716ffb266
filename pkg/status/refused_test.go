package status

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// withBadHeader is VirtualService shop/name at generation gen with a CR/LF
// in a header match name (Envoy refuses it) when bad is set, its status
// kept from the store as the API server keeps it.
func withBadHeader(s *model.Store, name string, gen int64, bad bool) *networkingv1.VirtualService {
	vs := virtualService(name, gen, false)
	if cur := s.World().Config(model.KindVirtualService, "shop", name); cur != nil {
		vs.Status = *cur.Object.(*networkingv1.VirtualService).Status.DeepCopy()
	}
	if bad {
		vs.Spec.Http[0].Match = []*networkingapi.HTTPMatchRequest{{Headers: map[string]*networkingapi.StringMatch{
			"x-a\r\nb": {MatchType: &networkingapi.StringMatch_Exact{Exact: "1"}},
		}}}
	}
	return vs
}

func refusedIn(s *model.Store, name string) string {
	c := s.World().Config(model.KindVirtualService, "shop", name)
	if c == nil {
		return ""
	}
	for _, x := range conditionsOf(c.Object) {
		if x.GetType() == RefusedConditionType {
			return x.GetReason() + ": " + x.GetMessage()
		}
	}
	return ""
}

// A config with values Envoy refuses is reported on the resource itself,
// in the gauge and in /debug/configz, beside (not instead of) what it sets
// that is unsupported, and the report goes once it is fixed.
func TestLeadReportsRefusedValuesUntilFixed(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	upsert(t, store, withBadHeader(store, "vs", 1, true))
	fs := &fakeSetter{store: store}
	a, logs, _ := newAuditor(t, store, fs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Start(ctx) })
	led := make(chan struct{})
	go func() { _ = a.Lead(ctx); close(led) }()
	t.Cleanup(func() { cancel(); <-led; wg.Wait() })

	waitFor(t, "the Refused condition", func() bool { return refusedIn(store, "vs") != "" })
	if got := refusedIn(store, "vs"); !strings.HasPrefix(got, ReasonBreaksEnvoyRules+": ") || !strings.Contains(got, `spec.http[0].match[0].headers."x-a\r\nb"`) {
		t.Errorf("condition %q does not name the field", got)
	}
	if n := testutil.ToFloat64(a.m.refused.WithLabelValues("VirtualService")); n != 1 {
		t.Errorf("discovery_config_refused{VirtualService} = %v, want 1", n)
	}
	if logs.count() == 0 {
		t.Error("nothing logged")
	}
	if key, v, ok := RefusedConfigzNote(store.World().Config(model.KindVirtualService, "shop", "vs")); !ok || key != "refused" || len(v.([]string)) != 1 {
		t.Errorf("configz note %q %v %v", key, v, ok)
	}

	upsert(t, store, withBadHeader(store, "vs", 2, false))
	waitFor(t, "the Refused condition cleared", func() bool { return refusedIn(store, "vs") == "" })
	waitFor(t, "the gauge back to 0", func() bool { return testutil.ToFloat64(a.m.refused.WithLabelValues("VirtualService")) == 0 })
	for _, c := range fs.all() {
		if c.typ == UnsupportedConditionType && c.c != nil {
			t.Errorf("an UnsupportedFields condition was set for a config that sets nothing unsupported: %+v", c)
		}
	}
}
