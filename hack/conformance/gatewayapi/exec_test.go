package gatewayapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// nodeName is the one Node the kubelet stand-in puts every Pod on.
const nodeName = "conformance-node"

// execServer is that Node's kubelet as far as `kubectl exec` goes: the
// mesh tests exec the echo `client` command in a client Pod, which the
// API server proxies to the Pod's Node's kubelet over HTTPS (without
// --kubelet-certificate-authority it does not check the kubelet's
// certificate, so httptest's self-signed one does). The SPDY
// remotecommand protocol is the library's; the command is answered by
// the echo client stand-in (echoclient_test.go).
type execServer struct {
	srv  *httptest.Server
	kube kubernetes.Interface
	p    *proxies
	t    *testing.T

	logOnce sync.Once
}

func startExecServer(t *testing.T, kube kubernetes.Interface, p *proxies) *execServer {
	t.Helper()
	e := &execServer{kube: kube, p: p, t: t}
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", e.serveExec)
	e.srv = httptest.NewUnstartedServer(mux)
	// The exec stream is an HTTP/1.1 upgrade: no HTTP/2 (StartTLS offers
	// only http/1.1 unless told otherwise).
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	return e
}

// port is the kubelet port the Node advertises.
func (e *execServer) port(t *testing.T) int32 {
	t.Helper()
	u, err := url.Parse(e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}

func (e *execServer) serveExec(w http.ResponseWriter, r *http.Request) {
	// The API server's URL, once: which address and port it dials is
	// the Node's status, so a mismatch shows here first.
	e.logOnce.Do(func() { e.t.Logf("kubelet: first exec from the API server: %s %s", r.Method, r.URL) })
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ns, pod := r.PathValue("ns"), r.PathValue("pod")
	remotecommand.ServeExec(w, r, e, ns+"/"+pod, "", r.PathValue("container"), r.URL.Query()["command"], opts,
		time.Minute, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

var _ remotecommand.Executor = (*execServer)(nil)

// ExecInContainer runs the one command the mesh tests exec, the echo
// client, as that Pod's sidecar would carry its requests out. Any other
// command, and a request that cannot be made, exits 1 with the reason
// on stderr: the suite retries, as it does while a real mesh converges.
func (e *execServer) ExecInContainer(ctx context.Context, name, _, _ string, cmd []string, _ io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	fail := func(err error) error {
		fmt.Fprintln(errOut, err)
		return utilexec.CodeExitError{Err: err, Code: 1}
	}
	ns, podName, _ := strings.Cut(name, "/")
	pod, err := e.kube.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return fail(err)
	}
	c, err := parseEchoClient(cmd)
	if err != nil {
		return fail(err)
	}
	if err := e.p.echoClient(ctx, e.t, pod, c, out); err != nil {
		return fail(err)
	}
	return nil
}

// registerNode creates the Node the Pods run on, its kubelet endpoint
// the exec server: InternalIP 127.0.0.1 only, as the API server prefers
// a Hostname address when there is one.
func registerNode(ctx context.Context, kube kubernetes.Interface, port int32) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	created, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", nodeName, err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	created.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of node %s: %w", nodeName, err)
	}
	return nil
}
