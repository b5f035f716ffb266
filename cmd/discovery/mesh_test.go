package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	tpb "istio.io/api/telemetry/v1alpha1"
	telemetryv1 "istio.io/client-go/pkg/apis/telemetry/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

// ldsWatch is a proxy's outbound listener stream (virtualInbound left
// out): it ACKs every response, as Envoy does, and hands each one over as
// JSON.
type ldsWatch struct {
	responses chan string
	cancel    context.CancelFunc
}

func watchListeners(t *testing.T, addr, id string, meta map[string]any) *ldsWatch {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); cc.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, err := structpb.NewStruct(meta)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: id, Metadata: md}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: listenerType}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	w := &ldsWatch{responses: make(chan string, 16), cancel: cancel}
	go func() {
		defer close(w.responses)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			var b strings.Builder
			for _, a := range resp.Resources {
				var l listenerv3.Listener
				if a.UnmarshalTo(&l) != nil {
					return
				}
				if l.GetName() == "virtualInbound" {
					// The outbound side is what these tests watch:
					// virtualInbound always sends its own port (15006)
					// to BlackHoleCluster, whatever the traffic policy.
					continue
				}
				js, _ := protojson.Marshal(&l)
				b.Write(js)
			}
			w.responses <- b.String()
			ack := &discovery.DiscoveryRequest{TypeUrl: listenerType, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}
			if stream.Send(ack) != nil {
				return
			}
		}
	}()
	return w
}

// next waits for a response that satisfies cond and returns how long it
// took.
func (w *ldsWatch) next(t *testing.T, timeout time.Duration, what string, cond func(string) bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(timeout)
	for {
		select {
		case js, ok := <-w.responses:
			if !ok {
				t.Fatalf("stream ended waiting for %s", what)
			}
			if cond(js) {
				return time.Since(start)
			}
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// quiet asserts that no response comes for d.
func (w *ldsWatch) quiet(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case js := <-w.responses:
		t.Fatalf("%s, yet the proxy was sent listeners: %.300s", why, js)
	case <-time.After(d):
	}
}

const (
	accessLogType = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog"
	blackHole     = `"cluster":"BlackHoleCluster"`
)

func hasAccessLog(js string) bool { return strings.Contains(js, accessLogType) }

// The istio ConfigMap on a real API server: a connected proxy receives
// what an edit changes without a restart (access log, REGISTRY_ONLY), an
// invalid edit keeps the last good MeshConfig and says so, a fix applies.
func TestMeshConfigMapEditsReachAConnectedProxy(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"istio-system", "shop"} {
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject(ns), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
	}
	if _, err := env.Client.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := env.Client.CoreV1().ConfigMaps("istio-system")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "istio"}, Data: map[string]string{"mesh": "defaultProviders:\n  metrics: [prometheus]\n"}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	plain := freePort(t)
	p := startServe(t, "--kubeconfig", env.Kubeconfig, "--grpc-address", plain)
	p.waitReady(t)
	w := watchListeners(t, plain, "sidecar~10.1.0.5~productpage.shop~shop.svc.cluster.local", map[string]any{"NAMESPACE": "shop"})
	w.next(t, 20*time.Second, "the first listeners, with istio.stats and no access log", func(js string) bool {
		return strings.Contains(js, `"istio.stats"`) && !hasAccessLog(js) && !strings.Contains(js, blackHole)
	})

	edit := func(mesh string) time.Time {
		t.Helper()
		cur, err := cms.Get(ctx, "istio", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Data["mesh"] = mesh
		start := time.Now()
		if _, err := cms.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return start
	}
	start := edit("defaultProviders:\n  metrics: [prometheus]\naccessLogFile: /dev/stdout\noutboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n")
	w.next(t, 10*time.Second, "listeners with the access log and REGISTRY_ONLY", func(js string) bool {
		return hasAccessLog(js) && strings.Contains(js, blackHole)
	})
	took := time.Since(start)
	t.Logf("ConfigMap edit to the proxy receiving the new listeners: %s", took)
	if took > 3*time.Second {
		t.Errorf("the edit took %s to reach the proxy; want well under 3s (debounce 100ms)", took)
	}

	// An invalid edit: nothing is pushed, the last good MeshConfig stays,
	// and /debug/meshz and the metric say so.
	edit("connectTimeout: 0s\naccessLogFile: /dev/stderr\n")
	waitFor(t, 10*time.Second, "the refusal in /debug/meshz", func() bool {
		_, body, _ := httpGet("http://" + p.monitor + "/debug/meshz")
		return strings.Contains(body, `"refused"`) && strings.Contains(body, "invalid connect timeout")
	})
	_, body, _ := httpGet("http://" + p.monitor + "/debug/meshz")
	if !strings.Contains(body, `"accessLogFile": "/dev/stdout"`) {
		t.Errorf("/debug/meshz does not show the last good MeshConfig in force:\n%s", body)
	}
	_, metrics, _ := httpGet("http://" + p.monitor + "/metrics")
	if !strings.Contains(metrics, "discovery_mesh_config_invalid 1") || !strings.Contains(metrics, `discovery_mesh_config_reloads_total{result="invalid"} 1`) {
		t.Errorf("metrics do not count the refusal:\n%s", grepLines(metrics, "discovery_mesh_config"))
	}
	if !strings.Contains(p.out.String(), "MeshConfig refused; the last good one stays in force") {
		t.Error("the refusal was not logged")
	}
	w.quiet(t, time.Second, "the MeshConfig was refused")

	// A valid edit applies again: every field it does not give is Istio's
	// default again (no access log, ALLOW_ANY).
	edit("defaultProviders:\n  metrics: [prometheus]\n")
	w.next(t, 10*time.Second, "listeners without the access log, ALLOW_ANY again", func(js string) bool {
		return !hasAccessLog(js) && !strings.Contains(js, blackHole)
	})
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

// File mode: --mesh-config applies the file, and an edit of it reaches a
// connected proxy.
func TestServeAppliesTheMeshConfigFile(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-r", "../../examples/basic/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("copy examples/basic: %v\n%s", err, out)
	}
	meshFile := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(meshFile, []byte("accessLogFile: /dev/stdout\naccessLogEncoding: JSON\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := freePort(t)
	p := startServe(t, "--config-dir", dir, "--mesh-config", meshFile, "--ca-dir", t.TempDir(), "--grpc-address", plain)
	p.waitReady(t)
	w := watchListeners(t, plain, "sidecar~127.0.0.10~productpage-v1-7d9c5b6f4-x2k8p.frontend~frontend.svc.cluster.local", map[string]any{"NAMESPACE": "frontend"})
	w.next(t, 20*time.Second, "listeners with the file's JSON access log", func(js string) bool {
		return hasAccessLog(js) && strings.Contains(js, `"jsonFormat"`)
	})
	_, body, _ := httpGet("http://" + p.monitor + "/debug/meshz")
	if !strings.Contains(body, "file "+meshFile) {
		t.Errorf("/debug/meshz source:\n%s", body)
	}
	tmp := meshFile + ".tmp"
	if err := os.WriteFile(tmp, []byte("outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, meshFile); err != nil {
		t.Fatal(err)
	}
	w.next(t, 10*time.Second, "REGISTRY_ONLY without the access log", func(js string) bool {
		return !hasAccessLog(js) && strings.Contains(js, blackHole)
	})
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The Telemetry API on a real API server: a root-namespace Telemetry
// naming prometheus gives a connected proxy istio.stats, and removing it
// takes it away, without a restart.
func TestTelemetryResourceReachesAConnectedProxy(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"istio-system", "shop"} {
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject(ns), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
	}
	if _, err := env.Client.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ext, err := apiextclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	kubetest.InstallCRDs(ctx, t, ext, model.KindTelemetry)
	plain := freePort(t)
	p := startServe(t, "--kubeconfig", env.Kubeconfig, "--grpc-address", plain)
	p.waitReady(t)
	w := watchListeners(t, plain, "sidecar~10.1.0.5~productpage.shop~shop.svc.cluster.local", map[string]any{"NAMESPACE": "shop"})
	w.next(t, 20*time.Second, "the first listeners, without istio.stats", func(js string) bool {
		return strings.Contains(js, `"istio.metadata_exchange"`) && !strings.Contains(js, `"istio.stats"`)
	})
	istio, err := istioclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tel := &telemetryv1.Telemetry{ObjectMeta: metav1.ObjectMeta{Name: "mesh-default", Namespace: "istio-system"}}
	tel.Spec.Metrics = []*tpb.Metrics{{Providers: []*tpb.ProviderRef{{Name: "prometheus"}}}}
	if _, err := istio.TelemetryV1().Telemetries("istio-system").Create(ctx, tel, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.next(t, 10*time.Second, "istio.stats from the Telemetry", func(js string) bool { return strings.Contains(js, `"istio.stats"`) })
	if err := istio.TelemetryV1().Telemetries("istio-system").Delete(ctx, "mesh-default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.next(t, 10*time.Second, "istio.stats gone with the Telemetry", func(js string) bool { return !strings.Contains(js, `"istio.stats"`) })
}
