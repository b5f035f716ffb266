package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config"
	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/grpctest"
	"github.com/meshplane/discovery/pkg/xds/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
	)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve runs the xDS server on loopback, reading store, until t ends, and
// returns its address.
func serve(t *testing.T, store *model.Store) string {
	t.Helper()
	opts := server.DefaultOptions()
	opts.DebounceAfter = 20 * time.Millisecond
	s, err := server.New(opts, store, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(server.Codec()))
	s.Register(gs)
	ctx, cancel := context.WithCancel(context.Background())
	served, started := make(chan struct{}), make(chan struct{})
	go func() { _ = gs.Serve(lis); close(served) }()
	go func() { _ = s.Start(ctx); close(started) }()
	t.Cleanup(func() { cancel(); <-started; gs.Stop(); <-served })
	return lis.Addr().String()
}

// run starts src feeding store until t ends and waits for its first sync.
func run(t *testing.T, src config.Source, store *model.Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Start(ctx, store) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", src.Name(), err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !src.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not sync", src.Name())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const serviceYAML = `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: ns1}
spec:
  clusterIP: 10.96.0.50
  ports:
  - {name: grpc, port: 7070, targetPort: 7070}
`

func sliceYAML(port int32) string {
	return fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: ns1, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: grpc, port: %d}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {ready: true}
`, port)
}

func write(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestGRPCClientFollowsAConfigDirectory(t *testing.T) {
	addrA, portA := grpctest.Backend(t)
	addrB, portB := grpctest.Backend(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "service.yaml"), serviceYAML)
	write(t, filepath.Join(dir, "endpoints.yaml"), sliceYAML(portA))
	store := model.NewStore(model.StoreOptions{})
	src, err := file.New(file.Options{Dir: dir, Debounce: 20 * time.Millisecond}, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, src, store)
	client := grpctest.Dial(t, grpctest.Bootstrap(serve(t, store), "ns1"), "xds:///echo.ns1.svc.cluster.local:7070")
	client.Eventually(t, addrA)
	write(t, filepath.Join(dir, "endpoints.yaml"), sliceYAML(portB))
	client.Eventually(t, addrB)
}

func TestGRPCClientFollowsTheAPIServer(t *testing.T) {
	env := testenv.Start(t)
	addrA, portA := grpctest.Backend(t)
	addrB, portB := grpctest.Backend(t)
	ctx := context.Background()
	kc := env.Client
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "ns1"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 7070, TargetPort: intstr.FromInt32(7070)}}},
	}
	if _, err := kc.CoreV1().Services("ns1").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server refuses loopback IPs in EndpointSlices; the backends
	// listen on loopback only, so the slice names a documentation address
	// that the client's dialer maps to 127.0.0.1.
	pn, ready := "grpc", true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: "ns1", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pn, Port: &portA}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{grpctest.DocumentationIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	if _, err := kc.DiscoveryV1().EndpointSlices("ns1").Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, src, store)
	client := grpctest.Dial(t, grpctest.Bootstrap(serve(t, store), "ns1"), "xds:///echo.ns1.svc.cluster.local:7070",
		map[string]string{grpctest.DocumentationIP: "127.0.0.1"})
	client.Eventually(t, addrA)

	move := func(port int32) {
		t.Helper()
		cur, err := kc.DiscoveryV1().EndpointSlices("ns1").Get(ctx, "echo-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Ports[0].Port = &port
		if _, err := kc.DiscoveryV1().EndpointSlices("ns1").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	move(portB)
	client.Eventually(t, addrB)

	// Without the API server the last World keeps serving; once it is
	// back, changes arrive again.
	env.StopAPIServer(t)
	for i := 0; i < 10; i++ {
		if got, err := client.Call(); err != nil || got != addrB {
			t.Fatalf("with the API server down, RPC %d went to %q (%v), want %s", i, got, err, addrB)
		}
	}
	env.StartAPIServer(t)
	move(portA)
	client.Eventually(t, addrA)
}
