package istioctlcompat

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// kubelet answers the API server's port-forward requests for the Pods the
// test places on its Node, as the kubelet does: the API server upgrades
// `kubectl port-forward` (and istioctl's, which is the same client) to
// SPDY and proxies it to https://<node address>:<kubelet port>/portForward/
// <namespace>/<pod>; each forwarded connection is a pair of streams (error
// and data) naming the Pod's port. The test cluster runs no kubelet, so
// this one forwards a Pod's ports to local addresses: the discovery
// process the Pod stands for.
type kubelet struct {
	node string
	srv  *httptest.Server

	mu    sync.Mutex
	ports map[string]map[int32]string // namespace/pod -> container port -> local address
}

// startKubelet serves port-forwarding on a loopback TLS port and registers
// it as the Node name; it stops when t ends.
func startKubelet(t *testing.T, kc kubernetes.Interface, name string) *kubelet {
	t.Helper()
	k := &kubelet{node: name, ports: map[string]map[int32]string{}}
	k.srv = httptest.NewUnstartedServer(http.HandlerFunc(k.serve))
	k.srv.StartTLS() // HTTP/1.1 only: the API server upgrades the connection
	t.Cleanup(k.srv.Close)
	port, err := strconv.Atoi(k.srv.URL[strings.LastIndex(k.srv.URL, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	node, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Without --kubelet-certificate-authority the API server does not
	// verify the kubelet's serving certificate.
	node.Status = corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
	}
	if _, err := kc.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return k
}

// forward makes the Pod namespace/pod's port reach addr.
func (k *kubelet) forward(namespace, pod string, port int32, addr string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := namespace + "/" + pod
	if k.ports[key] == nil {
		k.ports[key] = map[int32]string{}
	}
	k.ports[key][port] = addr
}

func (k *kubelet) target(key string, port int32) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	addr, ok := k.ports[key][port]
	return addr, ok
}

func (k *kubelet) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/portForward/"), "/")
	if len(parts) != 2 || !strings.HasPrefix(r.URL.Path, "/portForward/") {
		http.NotFound(w, r)
		return
	}
	key := parts[0] + "/" + parts[1]
	if _, err := httpstream.Handshake(r, w, []string{"portforward.k8s.io"}); err != nil {
		return // Handshake wrote the error
	}
	streams := make(chan httpstream.Stream, 4)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
		if s.Headers().Get(corev1.PortHeader) == "" {
			return fmt.Errorf("stream without a %q header", corev1.PortHeader)
		}
		streams <- s
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	conn.SetIdleTimeout(10 * time.Minute)
	pairs := map[string][2]httpstream.Stream{} // requestID -> error, data
	for {
		select {
		case <-conn.CloseChan():
			return
		case s := <-streams:
			id := s.Headers().Get(corev1.PortForwardRequestIDHeader)
			p := pairs[id]
			switch s.Headers().Get(corev1.StreamType) {
			case corev1.StreamTypeError:
				p[0] = s
			case corev1.StreamTypeData:
				p[1] = s
			default:
				s.Reset()
				continue
			}
			if p[0] != nil && p[1] != nil {
				delete(pairs, id)
				go k.pipe(key, p[0], p[1])
				continue
			}
			pairs[id] = p
		}
	}
}

// pipe connects one forwarded connection to the Pod's local address.
func (k *kubelet) pipe(key string, errStream, data httpstream.Stream) {
	defer errStream.Close()
	defer data.Close()
	port, err := strconv.ParseInt(data.Headers().Get(corev1.PortHeader), 10, 32)
	if err != nil {
		fmt.Fprintf(errStream, "invalid port %q", data.Headers().Get(corev1.PortHeader))
		return
	}
	addr, ok := k.target(key, int32(port))
	if !ok {
		fmt.Fprintf(errStream, "pod %s does not listen on port %d in this test", key, port)
		return
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintf(errStream, "dial %s: %v", addr, err)
		return
	}
	defer c.Close()
	go func() {
		_, _ = io.Copy(c, data)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(data, c)
}
