package gen

import (
	"fmt"
	"slices"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// TestChangesSinceCoverEveryStep derives a class through a dozen changes,
// full generations and endpoint updates mixed, and checks for every pair
// of its configurations that ChangesSince names every resource that
// differs, and answers only within keptAncestors steps.
func TestChangesSinceCoverEveryStep(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	g := newForTest(quietLog())
	p := sidecar(t, "ns")
	apply := func(yaml string) { applyYAML(t, store, yaml) }
	service := func(name, ip string, port int) string {
		return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: %s, namespace: ns}
spec: {clusterIP: %s, ports: [{name: http, port: %d}]}
`, name, ip, port)
	}
	endpoints := func(svc, ip string) string {
		return fmt.Sprintf(`
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %s-1, namespace: ns, labels: {kubernetes.io/service-name: %s}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [%s]}]
`, svc, svc, ip)
	}
	apply(service("a", "10.96.0.1", 80) + "---" + service("b", "10.96.0.2", 80) + "---" + endpoints("a", "10.1.0.1"))
	cfgs := []*ClassConfig{}
	cls, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfgs = append(cfgs, cls)
	for i := 0; i < 12; i++ {
		switch i % 3 {
		case 0: // a service added: a full generation
			apply(service(fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.1.%d", i+1), 80+i))
			cls, err = g.Class(store.World(), p, cls)
		case 1: // endpoints moved: an endpoint update
			apply(endpoints("a", fmt.Sprintf("10.1.0.%d", i+2)))
			cls, _ = g.UpdateEndpoints(cls, store.World(), []model.NamespacedName{{Namespace: "ns", Name: "a"}})
		case 2: // a VirtualService edit
			apply(fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: ns}
spec:
  hosts: [a]
  http: [{match: [{uri: {prefix: /v%d}}], route: [{destination: {host: b}}]}, {route: [{destination: {host: a}}]}]
`, i))
			cls, err = g.Class(store.World(), p, cls)
		}
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, cls)
	}
	for j := range cfgs {
		for i := 0; i <= j; i++ {
			got, ok := cfgs[j].ChangesSince(cfgs[i])
			if want := j-i <= keptAncestors+1; ok != want {
				t.Fatalf("configuration %d since %d: answered %v, want %v", j, i, ok, want)
			}
			if !ok {
				continue
			}
			for _, typ := range TypeURLs {
				for _, n := range DiffNames(cfgs[i].Sets[typ], cfgs[j].Sets[typ]) {
					if !slices.Contains(got[typ], n) {
						t.Errorf("configuration %d since %d: %s %s changed but is not named", j, i, ShortType(typ), n)
					}
				}
			}
		}
	}
	other, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfgs[1].ChangesSince(other); ok {
		t.Error("a configuration answered for one it does not descend from")
	}
}
