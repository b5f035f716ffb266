package gatewayapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/gateway-api/conformance/utils/echo"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
)

// echoCommand is Istio's echo `client URL [--method=M] [-H k:v]...
// [--count=N]`, as the mesh tests run it in a client Pod.
type echoCommand struct {
	url     *url.URL
	method  string
	headers [][2]string
	count   int
}

func parseEchoClient(args []string) (echoCommand, error) {
	c := echoCommand{method: "GET", count: 1}
	if len(args) == 0 || args[0] != "client" {
		return c, fmt.Errorf("only the echo client runs here, not %q", args)
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		// value is the flag's value: after "=", or the next argument.
		value := func(flag string) (string, error) {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", flag)
			}
			i++
			return args[i], nil
		}
		var err error
		switch {
		case a == "-H" || strings.HasPrefix(a, "-H=") || a == "--header" || strings.HasPrefix(a, "--header="):
			var kv string
			if kv, err = value(strings.SplitN(a, "=", 2)[0]); err == nil {
				k, v, _ := strings.Cut(kv, ":")
				c.headers = append(c.headers, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
			}
		case strings.HasPrefix(a, "--method"):
			c.method, err = value("--method")
		case strings.HasPrefix(a, "--count"):
			var v string
			if v, err = value("--count"); err == nil {
				c.count, err = strconv.Atoi(v)
			}
		case strings.HasPrefix(a, "-"):
			err = fmt.Errorf("echo client flag %q is not understood here", a)
		case c.url == nil:
			c.url, err = url.Parse(a)
		default:
			err = fmt.Errorf("a second URL %q", a)
		}
		if err != nil {
			return c, err
		}
	}
	if c.url == nil {
		return c, errors.New("echo client: no URL")
	}
	return c, nil
}

// grpcEchoMethod is the method the Istio echo client calls for grpc://.
const grpcEchoMethod = "/proto.EchoTestService/Echo"

// echoClient carries out the echo client's requests from pod as its
// sidecar would: the URL's host resolved as the Pod's DNS would, the
// connection to that address taken through the outbound listeners of
// the sidecar's configuration as discovery serves it, and each request
// answered by the evaluator's decision and the echo backend it picks
// (one pick per request of --count). It writes the echo client's output.
func (p *proxies) echoClient(ctx context.Context, t *testing.T, pod *corev1.Pod, c echoCommand, out io.Writer) error {
	req, err := p.meshRequest(ctx, pod, c)
	if err != nil {
		return err
	}
	cfg, err := p.sidecar(ctx, pod)
	if err != nil {
		return fmt.Errorf("sidecar configuration of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	d := dataplane.Evaluate(cfg, req)
	if testing.Verbose() {
		t.Logf("mesh %s/%s: %s %s -> %s", pod.Namespace, pod.Name, c.method, c.url, d.Summary())
	}
	var b strings.Builder
	for i := range c.count {
		a, err := p.answer(d, req, "")
		if err != nil {
			return err
		}
		if i > 0 {
			b.WriteString("\n")
		}
		writeEcho(&b, i, c.url.Scheme == "grpc", a)
	}
	_, err = io.WriteString(out, b.String())
	return err
}

// meshRequest is the request the echo client's application connection
// makes: to the address the URL's host resolves to, with the URL's host
// as authority unless a Host header is given.
func (p *proxies) meshRequest(ctx context.Context, pod *corev1.Pod, c echoCommand) (dataplane.Request, error) {
	host, port := c.url.Hostname(), c.url.Port()
	if port == "" {
		port = "80"
	}
	dstPort, err := strconv.Atoi(port)
	if err != nil {
		return dataplane.Request{}, fmt.Errorf("port of %s: %w", c.url, err)
	}
	ip, err := p.resolve(ctx, host, pod.Namespace)
	if err != nil {
		return dataplane.Request{}, err
	}
	req := dataplane.Request{
		Mode: dataplane.Outbound, SrcIP: pod.Status.PodIP, DstIP: ip, DstPort: uint32(dstPort),
		Protocol: dataplane.HTTP1, Method: c.method, Authority: c.url.Host, Path: c.url.RequestURI(),
		Headers: map[string]string{},
	}
	if c.url.Scheme == "grpc" {
		req.Protocol, req.Method, req.Path = dataplane.HTTP2, "POST", grpcEchoMethod
		req.Headers["content-type"] = "application/grpc"
		req.Headers["te"] = "trailers"
	}
	for _, h := range c.headers {
		k := strings.ToLower(h[0])
		if k == "host" {
			req.Authority = h[1]
			continue
		}
		if v, ok := req.Headers[k]; ok {
			req.Headers[k] = v + "," + h[1]
		} else {
			req.Headers[k] = h[1]
		}
	}
	return req, nil
}

// resolve answers for a Pod's resolver: an address is itself; a Service
// name, short (in the Pod's namespace), NAME.NS, NAME.NS.svc or the
// FQDN, is the Service's ClusterIP.
func (p *proxies) resolve(ctx context.Context, host, ns string) (string, error) {
	if net.ParseIP(host) != nil {
		return host, nil
	}
	name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(host, "."), ".cluster.local"), ".svc")
	svcName, svcNS, ok := strings.Cut(name, ".")
	if !ok {
		svcNS = ns
	}
	if strings.Contains(svcNS, ".") {
		return "", fmt.Errorf("lookup %s: no such host", host)
	}
	svc, err := p.kube.CoreV1().Services(svcNS).Get(ctx, svcName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("lookup %s: %w", host, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return "", fmt.Errorf("lookup %s: Service %s/%s has no ClusterIP", host, svcNS, svcName)
	}
	return svc.Spec.ClusterIP, nil
}

// sidecar is the configuration discovery serves to pod's sidecar now,
// reused for a short while like a gateway's.
func (p *proxies) sidecar(ctx context.Context, pod *corev1.Pod) (*dataplane.Config, error) {
	key := "sidecar " + pod.Namespace + "/" + pod.Name
	p.mu.Lock()
	c, ok := p.cache[key]
	p.mu.Unlock()
	if ok && time.Since(c.at) < configTTL {
		return c.cfg, nil
	}
	node, err := sidecarNode(pod)
	if err != nil {
		return nil, err
	}
	cfg, err := fetch(ctx, p.xds, node)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.cache[key] = cached{at: time.Now(), cfg: cfg, pod: pod}
	p.mu.Unlock()
	return cfg, nil
}

// writeEcho writes one answer as the Istio echo client prints it: its
// own lines ([i] StatusCode, ResponseHeader), then the echo server's
// body lines ([i body]) when a backend answered.
func writeEcho(b *strings.Builder, i int, grpc bool, a answer) {
	line := func(tag, field, value string) { fmt.Fprintf(b, "[%s] %s=%s\n", tag, field, value) }
	id := strconv.Itoa(i)
	line(id, "StatusCode", strconv.Itoa(a.status))
	for _, k := range sortedKeys(a.responseHeaders) {
		for _, v := range a.responseHeaders[k] {
			line(id, "ResponseHeader", k+":"+v)
		}
	}
	if a.pod == nil {
		return
	}
	body := id + " body"
	line(body, "StatusCode", "200")
	line(body, "ServiceVersion", a.pod.Labels["version"])
	line(body, "Host", a.host)
	if grpc {
		line(body, "Proto", "GRPC")
	} else {
		line(body, "URL", a.path)
		line(body, "Method", a.method)
		line(body, "Proto", "HTTP/1.1")
	}
	for _, k := range sortedKeys(a.requestHeaders) {
		for _, v := range a.requestHeaders[k] {
			line(body, "RequestHeader", k+":"+v)
		}
	}
	line(body, "Hostname", a.pod.Name)
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestParseEchoClient(t *testing.T) {
	cases := map[string]struct {
		args    []string
		want    echoCommand
		wantErr bool
	}{
		"reads the URL, method, headers and count as the mesh tests pass them": {
			args: []string{"client", "http://echo/v2?x=1", "--method=POST", "-H", "Host:echo-v1", "-H", "X-A: b", "--count=7"},
			want: echoCommand{method: "POST", headers: [][2]string{{"Host", "echo-v1"}, {"X-A", "b"}}, count: 7},
		},
		"takes a flag's value from the next argument": {
			args: []string{"client", "--method", "PUT", "grpc://echo:7070"},
			want: echoCommand{method: "PUT", count: 1},
		},
		"refuses another command":         {args: []string{"sh", "-c", "true"}, wantErr: true},
		"refuses a flag it does not know": {args: []string{"client", "http://echo", "--timeout=1s"}, wantErr: true},
		"refuses a command without a URL": {args: []string{"client", "--count=2"}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseEchoClient(tc.args)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error for %q", tc.args)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.url == nil || got.method != tc.want.method || got.count != tc.want.count || fmt.Sprint(got.headers) != fmt.Sprint(tc.want.headers) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestWriteEchoParses holds writeEcho to the suite's own parser of the
// echo client's output: a batch splits into its responses, each with the
// status, the answering Pod and the headers.
func TestWriteEchoParses(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "echo-v2-abc", Labels: map[string]string{"version": "v2"}}}
	var b strings.Builder
	writeEcho(&b, 0, false, answer{status: 200, pod: pod, method: "GET", path: "/p", host: "echo",
		requestHeaders: map[string][]string{"X-Header-Add": {"a", "b"}}, responseHeaders: map[string][]string{"x-header-set": {"set"}}})
	b.WriteString("\n")
	writeEcho(&b, 1, false, answer{status: 302, location: "http://example.org/", responseHeaders: map[string][]string{"location": {"http://example.org/"}}})
	sections := strings.Split(b.String(), "\n\n")
	if len(sections) != 2 {
		t.Fatalf("%d sections, want 2:\n%s", len(sections), b.String())
	}
	first, second := echo.ParseResponse(sections[0]), echo.ParseResponse(sections[1])
	if first.Code != "200" || first.Hostname != "echo-v2-abc" || first.Host != "echo" || first.URL != "/p" || first.Version != "v2" {
		t.Errorf("first answer parsed as %v", first)
	}
	if got := strings.Join(first.RequestHeaders.Values("X-Header-Add"), ","); got != "a,b" {
		t.Errorf("request header X-Header-Add = %q, want a,b", got)
	}
	if got := first.ResponseHeaders.Get("X-Header-Set"); got != "set" {
		t.Errorf("response header X-Header-Set = %q, want set", got)
	}
	if second.Code != "302" || second.Hostname != "" || second.ResponseHeaders.Get("Location") != "http://example.org/" {
		t.Errorf("second answer parsed as %v", second)
	}
}
