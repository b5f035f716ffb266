package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

// vmStream opens an ADS stream for a VM asking to be registered in group
// and returns it once the first response came, or the stream's error.
func vmStream(ctx context.Context, t *testing.T, conn *grpc.ClientConn, group string) (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, error) {
	t.Helper()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	meta, _ := structpb.NewStruct(map[string]any{"NAMESPACE": "vms", "SERVICE_ACCOUNT": "vm", "AUTO_REGISTER_GROUP": group})
	node := &core.Node{Id: "sidecar~10.4.0.9~vm-1.vms~vms.svc.cluster.local", Metadata: meta}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: clusterType}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if _, err := stream.Recv(); err != nil {
		return nil, err
	}
	return stream, nil
}

// discovery serve, on a real API server: a VM's agent on :15012 with its
// service account's token gets a WorkloadEntry from its WorkloadGroup,
// which goes away after the grace period once the stream ends; the
// plaintext port, which authenticates nobody, may not register.
func TestServeRegistersAVMAndCleansUp(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"istio-system", "vms"} {
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject(ns), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Client.CoreV1().ServiceAccounts("vms").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "vms"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := env.Client.CoreV1().ServiceAccounts("vms").CreateToken(ctx, "vm", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"istio-ca"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubetest.InstallCRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config), model.KindWorkloadGroup, model.KindWorkloadEntry)
	istio := istioclient.NewForConfigOrDie(env.Config)
	if _, err := istio.NetworkingV1().WorkloadGroups("vms").Create(ctx, &networkingv1.WorkloadGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "vms"},
		Spec: apinetworking.WorkloadGroup{
			Metadata: &apinetworking.WorkloadGroup_ObjectMeta{Labels: map[string]string{"app": "vm-app"}},
			Template: &apinetworking.WorkloadEntry{ServiceAccount: "vm"},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secure, plain := freePort(t), freePort(t)
	p := startServe(t, "--kubeconfig", env.Kubeconfig, "--secure-grpc-address", secure, "--grpc-address", plain,
		"--workload-entry-grace-period", "1s")
	p.waitReady(t)
	tlsCfg := meshRootTLS(t, env, "vms")

	// Plaintext: refused, nothing written.
	pc, err := grpc.NewClient(plain, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	defer pcancel()
	if _, err := vmStream(pctx, t, pc, "app"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("plaintext stream asking for registration: %v; want PermissionDenied", err)
	}

	sc, err := grpc.NewClient(secure, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)), grpc.WithPerRPCCredentials(bearer(tr.Status.Token)))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	// The stream stays open until sctx ends. The group reaches discovery's informer after the API server: until
	// then the stream is refused with FailedPrecondition, as by istiod.
	waitFor(t, 20*time.Second, "a stream admitted for registration", func() bool {
		_, err = vmStream(sctx, t, sc, "app")
		return err == nil
	})
	wes := istio.NetworkingV1().WorkloadEntries("vms")
	var we *networkingv1.WorkloadEntry
	waitFor(t, 20*time.Second, "the WorkloadEntry", func() bool {
		we, err = wes.Get(ctx, "app-10.4.0.9", metav1.GetOptions{})
		return err == nil
	})
	if we.Spec.GetAddress() != "10.4.0.9" || we.Spec.GetLabels()["app"] != "vm-app" ||
		we.Annotations["istio.io/autoRegistrationGroup"] != "app" || we.Annotations["istio.io/workloadController"] == "" {
		t.Errorf("entry %v %v", we.Annotations, &we.Spec)
	}
	scancel()
	waitFor(t, 30*time.Second, "the entry deleted after the grace period", func() bool {
		_, err := wes.Get(ctx, "app-10.4.0.9", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}
