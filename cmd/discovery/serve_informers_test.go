package main

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshplane/discovery/internal/testenv"
)

// requestCounts are, per resource, the API server's LIST requests
// (apiserver_request_total) and open WATCH requests
// (apiserver_longrunning_requests), across every client.
type requestCounts map[string]*struct{ lists, watches int }

func apiRequests(ctx context.Context, t *testing.T, c kubernetes.Interface) requestCounts {
	t.Helper()
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := requestCounts{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		list := strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `verb="LIST"`)
		watch := strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `verb="WATCH"`)
		if !list && !watch || !strings.Contains(line, `subresource=""`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `resource="`)
		resource, _, _ := strings.Cut(rest, `"`)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			continue
		}
		if out[resource] == nil {
			out[resource] = &struct{ lists, watches int }{}
		}
		if list {
			out[resource].lists += int(v)
		} else {
			out[resource].watches += int(v)
		}
	}
	return out
}

// since is what happened after before, per resource, sorted by resource.
func (r requestCounts) since(before requestCounts) []string {
	var out []string
	for res, n := range r {
		b := before[res]
		if b == nil {
			b = &struct{ lists, watches int }{}
		}
		if l, w := n.lists-b.lists, n.watches-b.watches; l != 0 || w != 0 {
			out = append(out, fmt.Sprintf("%s: %d LIST, %d WATCH", res, l, w))
		}
	}
	slices.Sort(out)
	return out
}

// Every part that reads Namespaces (the config source, the injector, the
// root-certificate publisher) reads them through one informer: the API
// server sees one LIST and one WATCH of namespaces from discovery.
func TestServeWatchesNamespacesOnce(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"istio-system", "shop"} {
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject(ns), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := apiRequests(ctx, t, env.Client)
	p := startServe(t, "--kubeconfig", env.Kubeconfig)
	p.waitReady(t)
	// The root publisher runs on the leader: once it has published, every
	// part that reads Namespaces has started.
	waitFor(t, 30*time.Second, "istio-ca-root-cert in shop", func() bool {
		_, err := env.Client.CoreV1().ConfigMaps("shop").Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		return err == nil
	})
	time.Sleep(time.Second) // let a late informer show up in the figures
	after := apiRequests(ctx, t, env.Client)
	// Every resource, for the record: a kind watched under several option
	// sets (ConfigMaps by name, by namespace) shows here as several.
	t.Logf("requests from discovery serve at start (WATCH: open now):\n%s", strings.Join(after.since(before), "\n"))
	ns, ns0 := after["namespaces"], before["namespaces"]
	if ns == nil || ns0 == nil {
		t.Fatal("no namespaces requests in the API server's metrics")
	}
	lists, watches := ns.lists-ns0.lists, ns.watches-ns0.watches
	if lists > 1 || watches != 1 {
		t.Errorf("discovery serve made %d LIST and holds %d WATCH of namespaces, want at most 1 LIST and 1 WATCH", lists, watches)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}
