package gatewayapi

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	pb "sigs.k8s.io/gateway-api/conformance/echo-basic/grpcechoserver"
	gwgrpc "sigs.k8s.io/gateway-api/conformance/utils/grpc"
	"sigs.k8s.io/gateway-api/conformance/utils/roundtripper"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
)

// proxies turns a Gateway's address into the configuration its proxy
// holds now: the Gateway whose status lists the address, a Ready Pod of
// its deployment (Istio's gateway-name label), and that Pod's xDS as
// discovery serves it. A configuration is reused for a short while, as
// the suite sends bursts of requests (weights) and retries until the
// answers are consistent.
type proxies struct {
	kube    kubernetes.Interface
	gateway gwclient.Interface
	kubelet *kubelet
	xds     string // discovery's plaintext xDS address

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	at  time.Time
	cfg *dataplane.Config
	pod *corev1.Pod
}

// configTTL bounds how stale a configuration may be. Pushes take a few
// hundred milliseconds; the suite waits seconds for consistency.
const configTTL = 300 * time.Millisecond

func (p *proxies) lookup(ctx context.Context, host string) (*dataplane.Config, *corev1.Pod, error) {
	p.mu.Lock()
	c, ok := p.cache[host]
	p.mu.Unlock()
	if ok && time.Since(c.at) < configTTL {
		return c.cfg, c.pod, nil
	}
	pod, err := p.gatewayPod(ctx, host)
	if err != nil {
		return nil, nil, err
	}
	node, err := gatewayNode(pod.Status.PodIP, pod.Name, pod.Namespace, pod.Labels)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := fetch(ctx, p.xds, node)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	p.cache[host] = cached{at: time.Now(), cfg: cfg, pod: pod}
	p.mu.Unlock()
	return cfg, pod, nil
}

// gatewayPod finds the proxy Pod behind a Gateway address.
func (p *proxies) gatewayPod(ctx context.Context, host string) (*corev1.Pod, error) {
	gws, err := p.gateway.GatewayV1().Gateways("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, gw := range gws.Items {
		for _, a := range gw.Status.Addresses {
			if a.Value != host {
				continue
			}
			pods, err := p.kube.CoreV1().Pods(gw.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "gateway.networking.k8s.io/gateway-name=" + gw.Name})
			if err != nil {
				return nil, err
			}
			for i := range pods.Items {
				if pods.Items[i].Status.PodIP != "" && pods.Items[i].DeletionTimestamp == nil {
					return &pods.Items[i], nil
				}
			}
			return nil, fmt.Errorf("gateway %s/%s (address %s) has no running proxy", gw.Namespace, gw.Name, host)
		}
	}
	return nil, fmt.Errorf("no Gateway has the address %s", host)
}

// errReset stands for a connection the proxy closes without an answer.
var errReset = errors.New("connection reset by the proxy")

// pick chooses an upstream by weight and a healthy host of it, as
// Envoy's weighted clusters and load balancer do (randomly).
func pick(d dataplane.Decision) (dataplane.Upstream, dataplane.Endpoint, bool) {
	n := rand.Uint32N(1000000)
	var up dataplane.Upstream
	var acc uint32
	for _, u := range d.Upstreams {
		acc += u.Weight
		up = u
		if n < acc {
			break
		}
	}
	var hosts []dataplane.Endpoint
	for _, e := range up.Cluster.Endpoints {
		if e.Health == "healthy" || e.Health == "" {
			hosts = append(hosts, e)
		}
	}
	if up.Cluster.Missing || len(hosts) == 0 {
		return up, dataplane.Endpoint{}, false
	}
	return up, hosts[rand.IntN(len(hosts))], true
}

// backend is the echo Pod a host address stands for.
func (p *proxies) backend(e dataplane.Endpoint) (*corev1.Pod, error) {
	// An original destination cluster's host is the address the client
	// dialled (the evaluator names it so).
	addr := strings.TrimPrefix(e.Address, "original-destination ")
	ip, _, err := net.SplitHostPort(addr)
	if err != nil {
		ip = addr
	}
	pod := p.kubelet.pod(ip)
	if pod == nil {
		return nil, fmt.Errorf("no Pod has the upstream address %s", e.Address)
	}
	return pod, nil
}

// httpRoundTripper answers the suite's HTTP requests with what the
// gateway's Envoy would do with discovery's configuration, and what the
// suite's echo backend would answer.
type httpRoundTripper struct{ p *proxies }

func (h httpRoundTripper) CaptureRoundTrip(r roundtripper.Request) (*roundtripper.CapturedRequest, *roundtripper.CapturedResponse, error) {
	ctx := context.Background()
	host, port := r.URL.Hostname(), r.URL.Port()
	if port == "" {
		port = "80"
		if r.URL.Scheme == "https" {
			port = "443"
		}
	}
	cfg, gwPod, err := h.p.lookup(ctx, host)
	if err != nil {
		return nil, nil, err
	}
	dst, _ := strconv.Atoi(port)
	method := r.Method
	if method == "" {
		method = "GET"
	}
	authority := r.Host
	if authority == "" {
		authority = r.URL.Host
	}
	req := dataplane.Request{
		Mode:      dataplane.Gateway,
		SrcIP:     "10.250.0.1",
		DstIP:     gwPod.Status.PodIP,
		DstPort:   uint32(dst),
		Protocol:  dataplane.HTTP1,
		Method:    method,
		Authority: authority,
		Path:      r.URL.RequestURI(),
		Headers:   map[string]string{},
	}
	proto := "HTTP/1.1"
	switch r.Protocol {
	case roundtripper.H2CPriorKnowledgeProtocol, roundtripper.H2Protocol:
		req.Protocol, proto = dataplane.HTTP2, "HTTP/2.0"
	}
	if r.URL.Scheme == "https" {
		req.TLS = dataplane.SimpleTLS
		req.SNI = r.ServerName
		if req.SNI == "" {
			req.SNI = strings.Split(authority, ":")[0]
		}
	}
	var echoSet string
	for k, v := range r.Headers {
		if strings.EqualFold(k, "X-Echo-Set-Header") {
			echoSet = strings.Join(v, ",")
			continue
		}
		req.Headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	d := dataplane.Evaluate(cfg, req)
	if testing.Verbose() && r.T != nil {
		r.T.Logf("%s %s%s -> %s", method, authority, req.Path, d.Summary())
	}
	a, err := h.p.answer(d, req, echoSet)
	if err != nil {
		return nil, nil, err
	}
	res := &roundtripper.CapturedResponse{StatusCode: a.status, Protocol: proto, Headers: a.responseHeaders}
	if a.location != "" {
		u, err := url.Parse(a.location)
		if err != nil {
			return nil, nil, fmt.Errorf("redirect location %q: %w", a.location, err)
		}
		res.RedirectRequest = &roundtripper.RedirectRequest{Scheme: u.Scheme, Host: u.Hostname(), Port: u.Port(), Path: u.Path}
	}
	if a.pod == nil {
		return &roundtripper.CapturedRequest{Method: method}, res, nil
	}
	captured := &roundtripper.CapturedRequest{
		Path: a.path, Host: a.host, Method: method, Protocol: proto, Headers: a.requestHeaders,
		Namespace: a.pod.Namespace, Pod: a.pod.Name,
	}
	return captured, res, nil
}

// answer is what a client gets for one request: a local reply of the
// proxy (pod nil), or the echo backend's answer from the Pod the proxy
// chose, with the request as that backend saw it.
type answer struct {
	status          int
	location        string
	responseHeaders map[string][]string // lower-case names

	pod                *corev1.Pod
	method, path, host string
	requestHeaders     map[string][]string // canonical names, as Go's net/http holds them
}

// answer plays out the evaluator's decision on req: Envoy's local reply,
// or a weighted pick of an upstream and a host of it, and what the
// suite's echo backend on that host answers. echoSet is the backend's
// X-Echo-Set-Header instruction ("k:v,k:v"). A reset is errReset.
func (p *proxies) answer(d dataplane.Decision, req dataplane.Request, echoSet string) (answer, error) {
	switch d.Outcome {
	case dataplane.Reset, dataplane.Fail:
		return answer{}, fmt.Errorf("%w: %s", errReset, d.Reason)
	case dataplane.Local:
		a := answer{status: d.Status, responseHeaders: map[string][]string{}}
		if d.Location != "" {
			a.location = d.Location
			a.responseHeaders["location"] = []string{d.Location}
		}
		return a, nil
	}
	up, ep, ok := pick(d)
	if !ok {
		return answer{status: 503}, nil
	}
	pod, err := p.backend(ep)
	if err != nil {
		return answer{}, err
	}
	// What the backend sees: the request after rewrites and header
	// changes.
	seen := map[string][]string{}
	for k, v := range req.Headers {
		seen[http.CanonicalHeaderKey(k)] = []string{v}
	}
	for _, c := range up.RequestHeaders {
		if name, ok := strings.CutPrefix(c, "-"); ok {
			delete(seen, http.CanonicalHeaderKey(strings.TrimSuffix(name, " (absent)")))
			continue
		}
		k, v, _ := strings.Cut(c, ": ")
		seen[http.CanonicalHeaderKey(k)] = strings.Split(v, ",")
	}
	a := answer{status: 200, pod: pod, method: req.Method, path: req.Path, host: req.Authority, requestHeaders: seen}
	if up.Path != "" {
		a.path = up.Path
	}
	if up.Authority != "" {
		a.host = up.Authority
	}
	// The echo backend answers ?delay=D after D: Envoy gives up with 504
	// when the route's timeout, or each try's, is shorter (every retry
	// waits as long).
	if delay := delayOf(a.path); delay > 0 {
		if limit := timeoutOf(d.Policy); limit > 0 && delay >= limit {
			return answer{status: 504}, nil
		}
	}
	// The echo backend sets the response headers it is asked to.
	backendHeaders := map[string][]string{}
	if echoSet != "" {
		for _, kv := range strings.Split(echoSet, ",") {
			k, v, _ := strings.Cut(kv, ":")
			if k != "" {
				backendHeaders[strings.ToLower(k)] = append(backendHeaders[strings.ToLower(k)], v)
			}
		}
	}
	a.responseHeaders = up.ResponseHeadersFrom(backendHeaders)
	return a, nil
}

// grpcClient answers the suite's gRPC calls the same way, for the echo
// service's methods.
type grpcClient struct{ p *proxies }

func (g grpcClient) Close() {}

func (g grpcClient) SendRPC(t *testing.T, address string, expected gwgrpc.ExpectedResponse, _ time.Duration) (*gwgrpc.Response, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	cfg, gwPod, err := g.p.lookup(context.Background(), host)
	if err != nil {
		return nil, err
	}
	method := "Echo"
	switch {
	case expected.EchoTwoRequest != nil:
		method = "EchoTwo"
	case expected.EchoThreeRequest != nil:
		method = "EchoThree"
	}
	fqm := "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/" + method
	dst, _ := strconv.Atoi(port)
	authority := address
	req := dataplane.Request{
		Mode: dataplane.Gateway, DstIP: gwPod.Status.PodIP, DstPort: uint32(dst),
		Protocol: dataplane.HTTP2, Method: "POST", Path: fqm,
		Headers: map[string]string{"content-type": "application/grpc", "te": "trailers"},
	}
	if md := expected.RequestMetadata; md != nil {
		if md.Authority != "" {
			authority = md.Authority
		}
		for k, v := range md.Metadata {
			req.Headers[strings.ToLower(k)] = v
		}
	}
	req.Authority = authority
	d := dataplane.Evaluate(cfg, req)
	if testing.Verbose() && t != nil {
		t.Logf("gRPC %s%s -> %s", authority, fqm, d.Summary())
	}
	resp := &gwgrpc.Response{Headers: &metadata.MD{}, Trailers: &metadata.MD{}}
	a, err := g.p.answer(d, req, "")
	switch {
	case errors.Is(err, errReset):
		resp.Code = codes.Unavailable
		return resp, nil
	case err != nil:
		return nil, err
	case a.pod == nil:
		resp.Code = httpToGRPC(a.status)
		return resp, nil
	}
	pod := a.pod
	resp.Code = codes.OK
	resp.Response = &pb.EchoResponse{Assertions: &pb.Assertions{
		FullyQualifiedMethod: fqm,
		Authority:            authority,
		Context:              &pb.Context{Namespace: pod.Namespace, Pod: pod.Name},
	}}
	return resp, nil
}

// httpToGRPC is gRPC's mapping of an HTTP status without grpc-status
// (Envoy's local replies to gRPC requests carry the same mapping).
func httpToGRPC(status int) codes.Code {
	switch status {
	case 200:
		return codes.OK
	case 400:
		return codes.Internal
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.Unimplemented
	case 429, 502, 503, 504:
		return codes.Unavailable
	}
	return codes.Unknown
}

// delayOf is the echo backend's ?delay= of a request path.
func delayOf(path string) time.Duration {
	_, q, ok := strings.Cut(path, "?")
	if !ok {
		return 0
	}
	v, err := url.ParseQuery(q)
	if err != nil {
		return 0
	}
	d, _ := time.ParseDuration(v.Get("delay"))
	return d
}

// timeoutOf is the shortest of the route's timeout and its per-try
// timeout in the evaluator's policy facts (0s: none).
func timeoutOf(policy []string) time.Duration {
	var out time.Duration
	for _, p := range policy {
		for _, f := range strings.Fields(p) {
			for _, key := range []string{"timeout=", "per_try="} {
				if v, ok := strings.CutPrefix(f, key); ok {
					if d, err := time.ParseDuration(v); err == nil && d > 0 && (out == 0 || d < out) {
						out = d
					}
				}
			}
		}
	}
	return out
}
