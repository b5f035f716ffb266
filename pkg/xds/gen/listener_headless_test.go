package gen

import (
	"slices"
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

func TestEndpointsShapeListeners(t *testing.T) {
	tcp := model.Port{Name: "tcp", Port: 9042, Protocol: model.ProtocolTCP}
	http := model.Port{Name: "http", Port: 8080, Protocol: model.ProtocolHTTP}
	tests := map[string]struct {
		svc  model.Service
		want bool
	}{
		"a headless service with a TCP port":      {svc: model.Service{Headless: true, Ports: []model.Port{http, tcp}}, want: true},
		"a headless service with HTTP ports only": {svc: model.Service{Headless: true, Ports: []model.Port{http}}, want: false},
		"a service with a cluster IP":             {svc: model.Service{Addresses: []string{"10.96.0.1"}, Ports: []model.Port{tcp}}, want: false},
		"a ServiceEntry with resolution NONE and no addresses": {
			svc: model.Service{Entry: &model.ServiceEntryInfo{Resolution: model.ResolutionNone}, Ports: []model.Port{tcp}}, want: true,
		},
		"a ServiceEntry resolved by DNS": {
			svc: model.Service{Entry: &model.ServiceEntryInfo{Resolution: model.ResolutionDNS}, Ports: []model.Port{tcp}}, want: false,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := EndpointsShapeListeners(&tc.svc); got != tc.want {
				t.Errorf("EndpointsShapeListeners = %v, want %v", got, tc.want)
			}
		})
	}
}

// chainNames lists the names of a listener's filter chains.
func chainNames(t *testing.T, cc *ClassConfig, name string) []string {
	t.Helper()
	l := listener(t, cc, name)
	if l == nil {
		t.Fatalf("no listener %s", name)
	}
	var out []string
	for _, fc := range l.FilterChains {
		out = append(out, fc.Name)
	}
	return out
}

func TestHeadlessEndpointChangeRebuildsPortListener(t *testing.T) {
	const host = "db.default.svc.cluster.local"
	slice := func(addrs ...string) model.Event {
		return worldtest.SliceWithPorts("default", "db", map[string]int32{"tcp": 9042}, addrs...)
	}
	evs, err := worldtest.Decode([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: default}\n" +
		"spec:\n  clusterIP: None\n  ports:\n  - {name: tcp, port: 9042}\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(append(evs, slice("10.1.0.2", "10.1.0.1"))...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "default")
	prev, err := g.Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(chainNames(t, prev, "0.0.0.0_9042"), ","), host+":9042|10.1.0.1,"+host+":9042|10.1.0.2"; got != want {
		t.Fatalf("chains %s, want %s", got, want)
	}
	if got := listenerCluster(t, prev, "0.0.0.0_9042", host+":9042|10.1.0.1"); got != "outbound|9042||"+host {
		t.Errorf("endpoint chain goes to %s", got)
	}
	if _, err := store.Apply(slice("10.1.0.2", "10.1.0.3")); err != nil {
		t.Fatal(err)
	}
	next, err := g.Class(store.World(), p, prev)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(chainNames(t, next, "0.0.0.0_9042"), ","), host+":9042|10.1.0.2,"+host+":9042|10.1.0.3"; got != want {
		t.Errorf("after the endpoint change the chains are %s, want %s", got, want)
	}
	if !slices.Contains(next.Changed[ListenerType], "0.0.0.0_9042") {
		t.Errorf("changed listeners %v, want 0.0.0.0_9042 among them", next.Changed[ListenerType])
	}
}
