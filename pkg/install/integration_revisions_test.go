package install

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshplane/discovery/internal/testenv"
)

// Issue 15, item 1: two revisions side by side on a real API server. A
// canary bootstrap renders only its control plane, leaves the default
// revision's shared objects (CRDs, shared cluster roles) to it and its
// gateway alone; uninstalling canary removes only canary's objects. Every
// object of the default install is compared before and after.
func TestRevisionsSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go playKubelet(ctx, t, env.Client)
	client := testClient(t, env)

	def := mustRender(t, Input{Profile: "default"})
	mustApply(ctx, t, client, def, ApplyOptions{Wait: true, ReadinessTimeout: time.Minute})
	before := snapshot(ctx, t, client, "")

	t.Run("--revision default is the default revision, not a second set", func(t *testing.T) {
		again := mustRender(t, Input{Profile: "default", Revision: "default"})
		if got, want := keys(again), keys(def); !slices.Equal(got, want) {
			t.Fatalf("--revision default renders %v, want the default revision's %v", got, want)
		}
		if res := mustApply(ctx, t, client, again, ApplyOptions{}); !res.NoChange() {
			t.Errorf("--revision default changed the default install: %+v", res)
		}
	})

	canary := mustRender(t, Input{Profile: "default", Revision: "canary"})
	for _, c := range canary.Components {
		if strings.HasPrefix(c.Name, gatewayPrefix) {
			t.Errorf("a canary control plane renders gateway component %s", c.Name)
		}
	}
	if len(canary.Notes) != 1 || !strings.Contains(canary.Notes[0], "istio-ingressgateway is not rendered") {
		t.Errorf("no note says why the canary has no gateway: %q", canary.Notes)
	}
	res := mustApply(ctx, t, client, canary, ApplyOptions{Wait: true, ReadinessTimeout: time.Minute})
	baseCount := len(canary.Components[0].Objects)
	if len(res.Skipped) != baseCount || len(res.Created) != len(canary.Objects())-baseCount || len(res.Changed)+len(res.Pruned) != 0 {
		t.Errorf("canary bootstrap: skipped %d (want the %d base objects), created %d, changed %v, pruned %v",
			len(res.Skipped), baseCount, len(res.Created), res.Changed, res.Pruned)
	}
	for _, s := range res.Skipped {
		if !strings.Contains(s, "left to revision default") {
			t.Errorf("skipped %s", s)
		}
	}
	assertSame(t, "after the canary bootstrap", before, snapshot(ctx, t, client, "default"))

	t.Run("check names the objects of another owner", func(t *testing.T) { testOwnershipCheck(ctx, t, client, def, canary) })
	t.Run("a gateway of canary's own, installed apart", func(t *testing.T) { testCanaryGateway(ctx, t, client, canary) })

	un, err := client.Uninstall(ctx, UninstallOptions{Revision: "canary"})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(canary.Objects()) - baseCount; len(un.Deleted) != want || len(un.Kept) != 0 {
		t.Errorf("uninstall canary deleted %d objects, want canary's %d; kept %v", len(un.Deleted), want, un.Kept)
	}
	for _, k := range un.Deleted {
		if !strings.Contains(k, "canary") {
			t.Errorf("uninstall canary deleted %s", k)
		}
	}
	if left := snapshot(ctx, t, client, "canary"); len(left) != 0 {
		t.Errorf("canary objects left after its uninstall: %v", sortedKeys(left))
	}
	assertSame(t, "after canary's uninstall", before, snapshot(ctx, t, client, ""))

	t.Run("the last uninstall takes the shared objects", func(t *testing.T) { testLastUninstall(ctx, t, client, canary, def) })
}

// testOwnershipCheck: check --revision fails where an object it renders
// is labelled for another revision (as the issue found after a canary
// install relabelled the default one's).
func testOwnershipCheck(ctx context.Context, t *testing.T, c *Client, def, canary *Manifest) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	for name, m := range map[string]*Manifest{"default": def, "canary": canary} {
		if r := c.checkOwnership(ctx, m); !r.OK {
			t.Errorf("revision %s: %s", name, r)
		}
	}
	relabel := func(rev string) {
		t.Helper()
		patch := []byte(`{"metadata":{"labels":{"` + LabelRevision + `":"` + rev + `"}}}`)
		if _, err := c.Kube.CoreV1().ConfigMaps("istio-system").Patch(ctx, "istio-sidecar-injector-canary", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel("default")
	defer relabel("canary")
	r := c.checkOwnership(ctx, canary)
	if r.OK || !strings.Contains(r.Detail, "ConfigMap/istio-system/istio-sidecar-injector-canary is owned by revision default") {
		t.Errorf("check --revision canary with a ConfigMap of revision default: %s", r)
	}
	if _, err := c.Apply(ctx, canary, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "nothing was applied") {
		t.Errorf("canary bootstrap over an object of revision default: err = %v", err)
	}
}

// testCanaryGateway installs a gateway of revision canary on its own,
// beside the default's; one named as the default's is refused; the canary
// control plane's bootstrap does not prune it.
func testCanaryGateway(ctx context.Context, t *testing.T, c *Client, canary *Manifest) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	before := snapshot(ctx, t, c, "default")
	gw := mustRender(t, Input{Profile: "empty", Revision: "canary", Sets: []string{
		"components.ingressGateways[0].name=istio-ingressgateway-canary", "components.ingressGateways[0].enabled=true",
	}})
	res := mustApply(ctx, t, c, gw, ApplyOptions{})
	if len(res.Created) != len(gw.Objects()) || len(res.Pruned) != 0 {
		t.Errorf("canary gateway: created %v, pruned %v", res.Created, res.Pruned)
	}
	if res := mustApply(ctx, t, c, canary, ApplyOptions{}); !res.NoChange() {
		t.Errorf("the canary control plane's bootstrap changed things: %+v", res)
	}
	clash := mustRender(t, Input{Profile: "empty", Revision: "canary", Sets: []string{"components.ingressGateways[0].enabled=true"}})
	_, err := c.Apply(ctx, clash, ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "Deployment/istio-system/istio-ingressgateway: a gateway of revision default") {
		t.Errorf("a canary gateway named as the default's: err = %v", err)
	}
	off := mustRender(t, Input{Profile: "empty", Revision: "canary", Sets: []string{
		"components.ingressGateways[0].name=istio-ingressgateway-canary", "components.ingressGateways[0].enabled=false",
	}})
	if res := mustApply(ctx, t, c, off, ApplyOptions{}); len(res.Pruned) != len(gw.Objects()) {
		t.Errorf("canary gateway off: pruned %v, want its %d objects", res.Pruned, len(gw.Objects()))
	}
	assertSame(t, "after canary's gateway came and went", before, snapshot(ctx, t, c, "default"))
}

// testLastUninstall: with canary back, uninstalling the default revision
// keeps the shared objects it owns (canary is still installed); the last
// uninstall removes them, all but the CRDs.
func testLastUninstall(ctx context.Context, t *testing.T, c *Client, canary, def *Manifest) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	mustApply(ctx, t, c, canary, ApplyOptions{})
	un, err := c.Uninstall(ctx, UninstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shared := 0
	for _, comp := range def.Components {
		if SharedComponent(comp.Name) {
			shared += len(comp.Objects)
		}
	}
	shared -= len(CRDNames(def))
	if len(un.Kept) != shared || len(un.Deleted) != len(def.Components[1].Objects) {
		t.Errorf("uninstall of default beside canary: deleted %v, kept %v (want its %d shared objects)", un.Deleted, un.Kept, shared)
	}
	if len(snapshot(ctx, t, c, "canary")) != len(canary.Objects())-len(canary.Components[0].Objects) {
		t.Error("uninstalling the default revision touched canary's objects")
	}
	un, err = c.Uninstall(ctx, UninstallOptions{Revision: "canary"})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(canary.Components[1].Objects) + shared; len(un.Deleted) != want {
		t.Errorf("the last uninstall deleted %d objects, want %d: %v", len(un.Deleted), want, un.Deleted)
	}
	left := snapshot(ctx, t, c, "")
	if len(left) != len(CRDNames(def)) {
		t.Errorf("after the last uninstall: %v, want only the CRDs", sortedKeys(left))
	}
}

func testClient(t *testing.T, env *testenv.Env) *Client {
	t.Helper()
	c, err := NewClient(env.Config, &syncBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	c.PollInterval = 100 * time.Millisecond
	return c
}

func mustRender(t *testing.T, in Input) *Manifest {
	t.Helper()
	m, err := Render(renderOpts(), in)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustApply(ctx context.Context, t *testing.T, c *Client, m *Manifest, opts ApplyOptions) *Result {
	t.Helper()
	res, err := c.Apply(ctx, m, opts)
	if err != nil {
		t.Fatalf("apply revision %s: %v\nprogress:\n%v", m.Revision, err, c.Progress)
	}
	return res
}

func keys(m *Manifest) []string {
	var out []string
	for _, o := range m.Objects() {
		out = append(out, objectKey(o))
	}
	sort.Strings(out)
	return out
}

// snapshot reads every object with the installer's labels (of revision
// rev, or of every revision when rev is ""), CRDs included, as JSON
// without the fields the server changes on every write: resourceVersion,
// managedFields and generation.
func snapshot(ctx context.Context, t *testing.T, c *Client, rev string) map[string]string {
	t.Helper()
	objs, err := c.listManaged(ctx, selector(rev), true)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range objs {
		md := o.Object["metadata"].(map[string]any)
		for _, k := range []string{"resourceVersion", "managedFields", "generation"} {
			delete(md, k)
		}
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		out[objectKey(o)] = string(b)
	}
	return out
}

// assertSame fails for every object of want that is missing from got or
// differs.
func assertSame(t *testing.T, when string, want, got map[string]string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: nothing to compare", when)
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: %s is gone", when, k)
		case !reflect.DeepEqual(w, g):
			t.Errorf("%s: %s changed:\nbefore: %s\nafter:  %s", when, k, w, g)
		}
	}
}
