package gatewayapi

import (
	"context"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/apis/v1alpha2"
	"sigs.k8s.io/gateway-api/apis/v1alpha3"
	xv1alpha1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	"sigs.k8s.io/gateway-api/conformance"
	"sigs.k8s.io/gateway-api/conformance/tests"
	"sigs.k8s.io/gateway-api/conformance/utils/config"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
)

// innerEnv, when set, makes TestSuite run: it is the child process the
// conformance test starts (conformance_test.go), whose subtests are the
// suite's tests. Run alone, `GATEWAY_API_SUITE=1 go test -run TestSuite
// -v ./gatewayapi` shows every request and decision.
const innerEnv = "GATEWAY_API_SUITE"

// TestSuite runs sigs.k8s.io/gateway-api's conformance suite against
// discovery on a real kube-apiserver.
func TestSuite(t *testing.T) {
	if os.Getenv(innerEnv) == "" {
		t.Skip("run by TestGatewayAPIConformance in a child process (set " + innerEnv + "=1 to run it alone)")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The experimental channel holds the standard one and TCPRoute,
	// TLSRoute and the other experimental kinds.
	kubetest.InstallCRDObjects(ctx, t, apiextclient.NewForConfigOrDie(env.Config), kubetest.GatewayAPIChannelCRDs(t, "experimental"))

	kc := env.Client
	for _, ns := range []string{"istio-system"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	kl := newKubelet(kc)
	xdsAddr := startDiscovery(t, env.Kubeconfig)
	// GatewayClass istio is discovery's to create (its class controller),
	// as istiod does: the suite's setup waits for it to be Accepted.
	gc := gwclient.NewForConfigOrDie(env.Config)

	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, install := range []func(*runtime.Scheme) error{v1alpha3.Install, v1alpha2.Install, xv1alpha1.Install, gwv1.Install, apiextv1.AddToScheme} {
		if err := install(c.Scheme()); err != nil {
			t.Fatal(err)
		}
	}
	p := &proxies{kube: kc, gateway: gc, kubelet: kl, xds: xdsAddr, cache: map[string]cached{}}
	// The mesh tests exec into Pods: their Node's kubelet is the exec
	// server.
	execs := startExecServer(t, kc, p)
	if err := registerNode(ctx, kc, execs.port(t)); err != nil {
		t.Fatal(err)
	}
	go kl.run(ctx, t)
	timeouts := config.DefaultTimeoutConfig()
	// A bare API server and one process: what is right is right within
	// seconds, and a failing expectation need not wait minutes.
	timeouts.MaxTimeToConsistency = 15 * time.Second
	timeouts.GatewayMustHaveCondition = 60 * time.Second
	timeouts.GatewayMustHaveAddress = 60 * time.Second
	timeouts.GWCMustBeAccepted = 60 * time.Second
	timeouts.NamespacesMustBeReady = 120 * time.Second
	timeouts.HTTPRouteMustHaveCondition = 30 * time.Second
	timeouts.RouteMustHaveParents = 30 * time.Second
	timeouts.GatewayListenersMustHaveConditions = 30 * time.Second
	timeouts.GatewayStatusMustHaveListeners = 30 * time.Second
	timeouts.HTTPRouteMustNotHaveParents = 30 * time.Second
	timeouts.TLSRouteMustHaveCondition = 30 * time.Second
	timeouts.TCPRouteMustHaveCondition = 30 * time.Second
	timeouts.LatestObservedGenerationSet = 30 * time.Second
	s, err := suite.NewConformanceTestSuite(suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			GatewayClassName:     className,
			CleanupBaseResources: true,
			CleanupTestResources: true,
			TimeoutConfig:        timeouts,
			SupportedFeatures:    claimed.UnsortedList(),
			RunTest:              os.Getenv("GATEWAY_API_TEST"),
			Mode:                 "default",
		},
		Client:       c,
		Clientset:    kc,
		RestConfig:   env.Config,
		RoundTripper: httpRoundTripper{p},
		GRPCClient:   grpcClient{p},
		ManifestFS:   []fs.FS{&conformance.Manifests},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Setup(t, tests.ConformanceTests)
	if err := s.Run(t, tests.ConformanceTests); err != nil {
		t.Fatal(err)
	}
}

// claimed are the features discovery claims and this harness can judge:
// the evaluator decides HTTP and gRPC requests, a gateway's or (Mesh) a
// client Pod's sidecar's; TCP, TLS passthrough, UDP and WebSocket tests
// open real connections to the Gateway's address and mirror tests read
// the backends' logs, which need a data plane.
var claimed = sets.New[features.FeatureName](
	features.SupportGateway,
	features.SupportHTTPRoute,
	features.SupportGRPCRoute,
	features.SupportReferenceGrant,
	features.SupportGatewayPort8080,
	features.SupportHTTPRouteQueryParamMatching,
	features.SupportHTTPRouteMethodMatching,
	features.SupportHTTPRouteResponseHeaderModification,
	features.SupportHTTPRoutePortRedirect,
	features.SupportHTTPRouteSchemeRedirect,
	features.SupportHTTPRoutePathRedirect,
	features.SupportHTTPRouteHostRewrite,
	features.SupportHTTPRoutePathRewrite,
	features.SupportHTTPRouteParentRefPort,
	features.SupportHTTPRouteBackendRequestHeaderModification,
	features.SupportHTTPRouteNamedRouteRule,
	features.SupportGRPCRouteNamedRouteRule,
	features.SupportHTTPRouteDestinationPortMatching,
	features.SupportGatewayInfrastructure,
	features.SupportGatewayHTTPListenerIsolation,
	features.SupportGatewayAddressEmpty,
	features.SupportHTTPRouteBackendProtocolH2C,
	features.SupportHTTPRouteRequestTimeout,
	features.SupportHTTPRouteBackendTimeout,
	features.SupportHTTPRoute303RedirectStatusCode,
	features.SupportHTTPRoute307RedirectStatusCode,
	features.SupportHTTPRoute308RedirectStatusCode,
	features.SupportMesh,
	features.SupportMeshClusterIPMatching,
	features.SupportMeshConsumerRoute,
	features.SupportMeshHTTPRouteRewritePath,
	features.SupportMeshHTTPRouteSchemeRedirect,
	features.SupportMeshHTTPRouteRedirectPort,
	features.SupportMeshHTTPRouteRedirectPath,
	features.SupportMeshHTTPRouteBackendRequestHeaderModification,
	features.SupportMeshHTTPRouteQueryParamMatching,
	features.SupportMeshHTTPRouteNamedRouteRule,
)

const className = "istio"

// startDiscovery builds and runs `discovery serve` on the API server,
// with the automated gateway deployment on, and returns its plaintext
// xDS address once it is ready.
func startDiscovery(t *testing.T, kubeconfig string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "discovery")
	build := exec.Command("go", "build", "-o", bin, "./cmd/discovery")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/discovery: %v\n%s", err, out)
	}
	xds, ready := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "serve", "--kubeconfig", kubeconfig, "--namespace", "istio-system",
		"--grpc-address", xds, "--secure-grpc-address", freeAddr(t), "--webhook-address", freeAddr(t),
		"--monitoring-address", freeAddr(t), "--readiness-address", ready,
		"--gateway-deployment-controller", "--log-level", "info")
	logPath := filepath.Join(t.TempDir(), "discovery.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() || testing.Verbose() {
			if data, err := os.ReadFile(logPath); err == nil {
				t.Logf("discovery's log (last 20 KB):\n%s", tailBytes(data, 20000))
			}
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + ready + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return xds
			}
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(logPath)
			t.Fatalf("discovery not ready after 90 s:\n%s", tailBytes(data, 20000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tailBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
