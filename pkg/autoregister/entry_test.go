package autoregister

import (
	"errors"
	"strings"
	"testing"
	"time"

	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/model"
)

func proxy(t *testing.T, ip string, meta map[string]any) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy("sidecar~"+ip+"~vm-1.shop~shop.svc.cluster.local", meta)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEntryName(t *testing.T) {
	long := strings.Repeat("g", 260)
	cases := map[string]struct {
		ip   string
		meta map[string]any
		want string
	}{
		"is the group and the IP":                    {"10.0.0.7", map[string]any{"AUTO_REGISTER_GROUP": "ratings"}, "ratings-10.0.0.7"},
		"adds the network":                           {"10.0.0.7", map[string]any{"AUTO_REGISTER_GROUP": "ratings", "NETWORK": "vpc1"}, "ratings-10.0.0.7-vpc1"},
		"writes an IPv6 address's colons as dashes":  {"fd00::7", map[string]any{"AUTO_REGISTER_GROUP": "ratings"}, "ratings-fd00--7"},
		"uses the first of INSTANCE_IPS":             {"10.0.0.7", map[string]any{"AUTO_REGISTER_GROUP": "ratings", "INSTANCE_IPS": "10.9.9.9,10.0.0.7"}, "ratings-10.9.9.9"},
		"is empty for a proxy that does not ask":     {"10.0.0.7", nil, ""},
		"cuts a name too long from the front to 253": {"10.0.0.7", map[string]any{"AUTO_REGISTER_GROUP": long}, (long + "-10.0.0.7")[len(long)+9-253:]},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := EntryName(proxy(t, tc.ip, tc.meta))
			if got != tc.want {
				t.Errorf("EntryName = %q, want %q", got, tc.want)
			}
			if len(got) > 253 {
				t.Errorf("name has %d characters", len(got))
			}
		})
	}
}

func group() *networkingv1.WorkloadGroup {
	return &networkingv1.WorkloadGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "ratings", Namespace: "shop", UID: "uid-1"},
		Spec: apinetworking.WorkloadGroup{
			Metadata: &apinetworking.WorkloadGroup_ObjectMeta{
				Labels:      map[string]string{"app": "ratings", "tier": "group"},
				Annotations: map[string]string{"team": "a"},
			},
			Template: &apinetworking.WorkloadEntry{
				ServiceAccount: "ratings-vm", Ports: map[string]uint32{"http": 9080},
				Labels: map[string]string{"tier": "template", "version": "v1"},
			},
		},
	}
}

func TestEntryFromGroup(t *testing.T) {
	p := proxy(t, "10.0.0.7", map[string]any{
		"AUTO_REGISTER_GROUP": "ratings", "NETWORK": "vpc1",
		"LABELS":       map[string]any{"version": "v2", "istio-locality": "r1.z1"},
		"PROXY_CONFIG": map[string]any{"readinessProbe": map[string]any{"httpGet": map[string]any{"port": 9080.0}}},
	})
	p.NodeLocality = model.Locality{Region: "r1", Zone: "z1"}
	g := group()
	we := EntryFromGroup(EntryName(p), p, g)

	if we.Name != "ratings-10.0.0.7-vpc1" || we.Namespace != "shop" {
		t.Errorf("entry %s/%s", we.Namespace, we.Name)
	}
	wantLabels := map[string]string{"app": "ratings", "tier": "group", "version": "v2"}
	if !equal(we.Spec.GetLabels(), wantLabels) || !equal(we.Labels, wantLabels) {
		t.Errorf("labels spec %v, meta %v; want %v (template < group metadata < node, no istio-locality)", we.Spec.GetLabels(), we.Labels, wantLabels)
	}
	wantAnn := map[string]string{"team": "a", AnnotationGroup: "ratings", AnnotationHealthChecks: "true"}
	if !equal(we.Annotations, wantAnn) {
		t.Errorf("annotations %v, want %v", we.Annotations, wantAnn)
	}
	if we.Spec.GetAddress() != "10.0.0.7" || we.Spec.GetNetwork() != "vpc1" || we.Spec.GetLocality() != "r1/z1" ||
		we.Spec.GetServiceAccount() != "ratings-vm" || we.Spec.GetPorts()["http"] != 9080 {
		t.Errorf("spec %v", &we.Spec)
	}
	if len(we.OwnerReferences) != 1 {
		t.Fatalf("owner references %v", we.OwnerReferences)
	}
	o := we.OwnerReferences[0]
	if o.APIVersion != "networking.istio.io/v1" || o.Kind != "WorkloadGroup" || o.Name != "ratings" || o.UID != "uid-1" || o.Controller == nil || !*o.Controller {
		t.Errorf("owner %+v", o)
	}
	// The group is not changed.
	if g.Spec.GetTemplate().GetAddress() != "" || g.Spec.GetTemplate().GetLabels()["tier"] != "template" {
		t.Errorf("the group's template was changed: %v", g.Spec.GetTemplate())
	}
	// Without a readinessProbe, no health checks.
	plain := proxy(t, "10.0.0.8", map[string]any{"AUTO_REGISTER_GROUP": "ratings", "PROXY_CONFIG": map[string]any{}})
	if _, ok := EntryFromGroup(EntryName(plain), plain, g).Annotations[AnnotationHealthChecks]; ok {
		t.Error("health checks enabled without a readinessProbe")
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestCheckIdentity(t *testing.T) {
	id := &ca.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "ratings-vm"}
	cases := map[string]struct {
		caller *ca.Identity
		ns, sa string
		ok     bool
	}{
		"admits the entry's own service account":               {id, "shop", "ratings-vm", true},
		"admits any service account when the entry names none": {id, "shop", "", true},
		"refuses a stream without a verified identity":         {nil, "shop", "", false},
		"refuses another namespace":                            {id, "bank", "", false},
		"refuses another service account":                      {id, "shop", "payments", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := CheckIdentity(tc.caller, tc.ns, tc.sa)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckIdentity = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrIdentity) {
				t.Errorf("%v does not wrap ErrIdentity", err)
			}
		})
	}
}

func annotated(kv ...string) *networkingv1.WorkloadEntry {
	we := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
	for i := 0; i+1 < len(kv); i += 2 {
		we.Annotations[kv[i]] = kv[i+1]
	}
	return we
}

func TestVerdicts(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return t0.Add(d).Format(timeFormat) }
	connect := map[string]struct {
		we    *networkingv1.WorkloadEntry
		write bool
	}{
		"marks a new entry": {annotated(), true},
		"takes over an older connection of another replica":  {annotated(AnnotationController, "b", AnnotationConnectedAt, at(-time.Minute)), true},
		"leaves a newer connection of another replica":       {annotated(AnnotationController, "b", AnnotationConnectedAt, at(time.Minute)), false},
		"leaves an entry disconnected after this connection": {annotated(AnnotationDisconnectedAt, at(time.Second)), false},
		"does not write what is recorded":                    {annotated(AnnotationController, "a", AnnotationConnectedAt, at(0)), false},
	}
	for name, tc := range connect {
		t.Run("connect "+name, func(t *testing.T) {
			if got, _ := connectVerdict(tc.we, "a", t0); got != tc.write {
				t.Errorf("connectVerdict = %v, want %v", got, tc.write)
			}
		})
	}
	disconnect := map[string]struct {
		we    *networkingv1.WorkloadEntry
		write bool
	}{
		"marks this replica's connection": {annotated(AnnotationController, "a", AnnotationConnectedAt, at(0)), true},
		"leaves a later connection":       {annotated(AnnotationController, "a", AnnotationConnectedAt, at(time.Second)), false},
		"leaves another replica's entry":  {annotated(AnnotationController, "b", AnnotationConnectedAt, at(-time.Second)), false},
	}
	for name, tc := range disconnect {
		t.Run("disconnect "+name, func(t *testing.T) {
			if got := disconnectVerdict(tc.we, "a", t0, t0.Add(time.Minute)); got != tc.write {
				t.Errorf("disconnectVerdict = %v, want %v", got, tc.write)
			}
		})
	}
}

func TestShouldCleanup(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) string { return now.Add(-d).Format(timeFormat) }
	cases := map[string]struct {
		we   *networkingv1.WorkloadEntry
		want bool
	}{
		"deletes an entry disconnected for the grace period": {annotated(AnnotationGroup, "g", AnnotationDisconnectedAt, ago(10*time.Second)), true},
		"keeps one within the grace period":                  {annotated(AnnotationGroup, "g", AnnotationDisconnectedAt, ago(9*time.Second)), false},
		"keeps a connected entry":                            {annotated(AnnotationGroup, "g", AnnotationConnectedAt, ago(time.Minute)), false},
		"deletes one connected longer than 1.5 stream ages":  {annotated(AnnotationGroup, "g", AnnotationConnectedAt, ago(46*time.Minute)), true},
		"keeps an entry that was not auto-registered":        {annotated(AnnotationDisconnectedAt, ago(time.Hour)), false},
		"keeps an entry never marked either way":             {annotated(AnnotationGroup, "g"), false},
		"deletes one whose disconnect time is malformed":     {annotated(AnnotationGroup, "g", AnnotationDisconnectedAt, "yesterday"), true},
	}
	o := Options{MaxConnectionAge: 30 * time.Minute}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ShouldCleanup(tc.we, now, 10*time.Second, o.staleAfter()); got != tc.want {
				t.Errorf("ShouldCleanup = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSetConditionKeepsANewerProbe(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	we := &networkingv1.WorkloadEntry{}
	if !setCondition(we, healthCondition(false, "probe failed", t0)) {
		t.Fatal("first condition not set")
	}
	if setCondition(we, healthCondition(true, "", t0.Add(-time.Second))) {
		t.Error("an older report replaced a newer one")
	}
	if !setCondition(we, healthCondition(true, "", t0.Add(time.Second))) || len(we.Status.Conditions) != 1 ||
		we.Status.Conditions[0].GetStatus() != "True" {
		t.Errorf("conditions %v", we.Status.Conditions)
	}
}
