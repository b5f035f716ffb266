package gen

import (
	"testing"

	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// A class's telemetry stands through a change that touches nothing it
// read (a service added): the next generation keeps it, and so its
// variants keep theirs (Variant). A Telemetry applied makes a new one,
// and the configuration is what generating afresh gives.
func TestClassTelemetryStandsThroughOtherChanges(t *testing.T) {
	store, o := perAddressMesh(t)
	g := newTestGenerator(t, o, false)
	p := namespaceProxy(t, "ns-0")
	a := mustClass(t, g, store.World(), p, nil)
	if a.scope.tel == nil {
		t.Fatal("the class has no telemetry: the test shows nothing")
	}
	if _, err := store.Apply(worldtest.Service("ns-1", "added", "10.96.9.1")); err != nil {
		t.Fatal(err)
	}
	b := mustClass(t, g, store.World(), p, a)
	if b.scope.tel != a.scope.tel {
		t.Error("a service added made the class's telemetry again")
	}
	applyYAML(t, store, meshAccessLogs)
	c := mustClass(t, g, store.World(), p, b)
	if c.scope.tel == b.scope.tel {
		t.Fatal("a Telemetry applied left the class's telemetry as it was")
	}
	fresh := mustClass(t, newTestGenerator(t, o, false), store.World(), p, nil)
	for _, typ := range TypeURLs {
		if got, want := c.Sets[typ].Version, fresh.Sets[typ].Version; got != want {
			t.Errorf("%s: version %s, afresh %s", ShortType(typ), got, want)
		}
	}
	if c.Sets[ListenerType].Version == b.Sets[ListenerType].Version {
		t.Error("the access logs changed no listener: the test shows nothing")
	}
}
