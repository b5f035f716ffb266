package autoregister

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/server"
	"github.com/meshplane/discovery/pkg/xds/streamauth"
)

// fixedCaller authenticates every stream as the VM's service account, as
// the CA would a VM's certificate.
type fixedCaller struct{ id ca.Identity }

func (f fixedCaller) Authenticate(context.Context) (ca.Identity, string, error) {
	return f.id, "test", nil
}

func run(t *testing.T, start func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// eventually polls cond until it holds, or fails the test after timeout.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last: %s", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIntegrationAutoRegistration connects an ADS client with a VM's
// auto-registration metadata to an xDS server on a real API server: its
// WorkloadEntry appears with the group's labels, the annotations and the
// group as owner; its health reports flip the Healthy condition; once it
// disconnects, the entry is deleted after the grace period.
func TestIntegrationAutoRegistration(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	kubetest.InstallCRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config), model.KindWorkloadGroup, model.KindWorkloadEntry)
	istio := istioclient.NewForConfigOrDie(env.Config)
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g, err := istio.NetworkingV1().WorkloadGroups("shop").Create(ctx, group(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	run(t, func(ctx context.Context) error { return src.Start(ctx, store) })
	eventually(t, "the WorkloadGroup in the World", func() (bool, string) {
		return store.World().Config(model.KindWorkloadGroup, "shop", "ratings") != nil, "not yet"
	})

	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	opts.Replica, opts.GracePeriod = "discovery-a", 200*time.Millisecond
	ctl, err := New(opts, store.World, istio, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctl.Start)
	xopts := server.DefaultOptions()
	xopts.DebounceAfter, xopts.DebounceMax = 10*time.Millisecond, time.Second
	xds, err := server.New(xopts, store, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	xds.SetRegistrar(ctl)
	guard := streamauth.New(fixedCaller{*vmIdentity}, log, reg)
	gs := grpc.NewServer(grpc.ChainStreamInterceptor(guard.StreamInterceptor()))
	xds.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(served) }()
	t.Cleanup(func() { gs.Stop(); <-served })
	run(t, xds.Start)

	// The VM's agent: its node asks for registration in "ratings" and
	// probes the workload (PROXY_CONFIG.readinessProbe).
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sctx, closeStream := context.WithCancel(ctx)
	defer closeStream()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	md, err := structpb.NewStruct(map[string]any{
		"AUTO_REGISTER_GROUP": "ratings", "NAMESPACE": "shop", "SERVICE_ACCOUNT": "ratings-vm",
		"LABELS":       map[string]any{"version": "v2"},
		"PROXY_CONFIG": map[string]any{"readinessProbe": map[string]any{"httpGet": map[string]any{"port": 9080.0}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "sidecar~10.0.0.7~vm-1.shop~shop.svc.cluster.local", Metadata: md}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: gen.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first response: %v", err)
	}

	wes := istio.NetworkingV1().WorkloadEntries("shop")
	var we *networkingv1.WorkloadEntry
	eventually(t, "the WorkloadEntry", func() (bool, string) {
		we, err = wes.Get(ctx, "ratings-10.0.0.7", metav1.GetOptions{})
		return err == nil, errString(err)
	})
	if we.Spec.GetAddress() != "10.0.0.7" || we.Spec.GetServiceAccount() != "ratings-vm" ||
		we.Spec.GetLabels()["app"] != "ratings" || we.Spec.GetLabels()["version"] != "v2" || we.Labels["tier"] != "group" {
		t.Errorf("spec %v, labels %v", &we.Spec, we.Labels)
	}
	for k, want := range map[string]string{AnnotationGroup: "ratings", AnnotationController: "discovery-a", AnnotationHealthChecks: "true", "team": "a"} {
		if we.Annotations[k] != want {
			t.Errorf("annotation %s = %q, want %q", k, we.Annotations[k], want)
		}
	}
	if we.Annotations[AnnotationConnectedAt] == "" {
		t.Error("no connectedAt annotation")
	}
	if len(we.OwnerReferences) != 1 || we.OwnerReferences[0].UID != g.UID || we.OwnerReferences[0].Kind != "WorkloadGroup" {
		t.Errorf("owner references %v, want the WorkloadGroup %s", we.OwnerReferences, g.UID)
	}

	healthIs := func(want string) func() (bool, string) {
		return func() (bool, string) {
			we, err := wes.Get(ctx, "ratings-10.0.0.7", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range we.Status.Conditions {
				if c.GetType() == ConditionHealthy {
					return c.GetStatus() == want, c.GetStatus() + " " + c.GetMessage()
				}
			}
			return false, "no Healthy condition"
		}
	}
	// The agent's health reports: error detail says unhealthy.
	if err := stream.Send(&discovery.DiscoveryRequest{
		TypeUrl:     server.HealthType,
		ErrorDetail: &rpcstatus.Status{Code: 14, Message: "connect: connection refused"},
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Healthy=False", healthIs("False"))
	if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: server.HealthType}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Healthy=True", healthIs("True"))

	// Disconnect: marked, then deleted once the grace period has passed.
	closeStream()
	eventually(t, "the WorkloadEntry deleted after the grace period", func() (bool, string) {
		we, err := wes.Get(ctx, "ratings-10.0.0.7", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, "annotations " + we.Annotations[AnnotationDisconnectedAt]
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
