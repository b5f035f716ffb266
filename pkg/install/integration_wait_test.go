package install

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/meshplane/discovery/internal/testenv"
)

// Issue 15, item 6: a wait that times out still applies the remaining
// components and prunes, says what is not ready and why (the reason, not
// the client's rate limiter or the deadline), with a heartbeat meanwhile;
// once ready, a re-run changes nothing and succeeds.
func TestTimedOutWaitStillAppliesAndPrunes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var discoveryReady atomic.Bool
	go playKubeletFor(ctx, env, func(name string) bool { return name != "discovery" || discoveryReady.Load() })
	progress := &syncBuffer{}
	client, err := NewClient(env.Config, progress)
	if err != nil {
		t.Fatal(err)
	}
	client.PollInterval, client.Heartbeat = 100*time.Millisecond, 300*time.Millisecond

	def := mustRender(t, Input{Profile: "default"})
	// What an earlier bootstrap made and this one no longer renders.
	mustCreate(ctx, t, client, "v1", "Namespace", "", "istio-system", nil, nil, nil)
	stale := mustCreate(ctx, t, client, "v1", "ConfigMap", "istio-system", "stale", map[string]string{
		LabelManagedBy: ManagedByValue, LabelComponent: ComponentDiscovery, LabelRevision: "default",
	}, nil, nil)

	res, err := client.Apply(ctx, def, ApplyOptions{Wait: true, ReadinessTimeout: 2 * time.Second})
	var nr *NotReadyError
	if !errors.As(err, &nr) || nr.Component != ComponentDiscovery {
		t.Fatalf("err = %v, want discovery not ready\nprogress:\n%s", err, progress)
	}
	for _, want := range []string{"Deployment/istio-system/discovery (", "Every component was applied and pruned", "not waited for: gateway-istio-ingressgateway", "run bootstrap again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	if len(res.Created) != len(def.Objects()) || !strings.Contains(strings.Join(res.Pruned, " "), objectKey(stale)) {
		t.Errorf("after the timeout: created %d of %d, pruned %v (want %s)", len(res.Created), len(def.Objects()), res.Pruned, objectKey(stale))
	}
	if !strings.Contains(progress.String(), "still waiting (") || !strings.Contains(progress.String(), "Deployment/istio-system/discovery (") {
		t.Errorf("no heartbeat while waiting:\n%s", progress)
	}

	t.Run("a short timeout, and a throttled client, still give the reason", func(t *testing.T) {
		testShortTimeoutReason(ctx, t, env, def)
	})

	discoveryReady.Store(true)
	res, err = client.Apply(ctx, def, ApplyOptions{Wait: true, ReadinessTimeout: 30 * time.Second})
	if err != nil || !res.NoChange() {
		t.Errorf("re-run once ready: %+v, %v", res, err)
	}
}

// testShortTimeoutReason waits 1ms (and, through a client throttled to one
// request a second, 500ms) for a Deployment whose spec its controller has
// not seen.
func testShortTimeoutReason(ctx context.Context, t *testing.T, env *testenv.Env, def *Manifest) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"example.com/restart":"1"}}}}}`)
	if _, err := env.Client.AppsV1().Deployments("istio-system").Patch(ctx, "discovery", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	throttled := rest.CopyConfig(env.Config)
	throttled.QPS, throttled.Burst = 1, 1
	for name, tc := range map[string]struct {
		cfg     *rest.Config
		timeout time.Duration
	}{"1ms": {env.Config, time.Millisecond}, "throttled": {throttled, 500 * time.Millisecond}} {
		c, err := NewClient(tc.cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.PollInterval = 100 * time.Millisecond
		comp := def.Components[1]
		err = c.waitComponent(ctx, comp, tc.timeout)
		if err == nil || !strings.Contains(err.Error(), "Deployment/istio-system/discovery (the controller has not seen the latest spec)") ||
			strings.Contains(err.Error(), "rate limiter") || strings.Contains(err.Error(), "context deadline") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// playKubeletFor marks available the installer's Deployments that ready
// says may be, until ctx ends.
func playKubeletFor(ctx context.Context, env *testenv.Env, ready func(name string) bool) {
	for ctx.Err() == nil {
		list, err := env.Client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedByValue})
		if err == nil {
			for i := range list.Items {
				if ready(list.Items[i].Name) {
					markAvailable(ctx, env.Client, &list.Items[i])
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
