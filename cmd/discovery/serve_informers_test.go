package main

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshplane/discovery/internal/testenv"
)

// namespaceCalls counts the API server's LIST requests for namespaces
// (apiserver_request_total) and its open WATCH requests for them
// (apiserver_longrunning_requests), across every client.
func namespaceCalls(ctx context.Context, t *testing.T, c kubernetes.Interface) (lists, watches int) {
	t.Helper()
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `resource="namespaces"`) || !strings.Contains(line, `subresource=""`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `verb="LIST"`):
			lists += int(v)
		case strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `verb="WATCH"`):
			watches += int(v)
		}
	}
	return lists, watches
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
	lists0, watches0 := namespaceCalls(ctx, t, env.Client)
	p := startServe(t, "--kubeconfig", env.Kubeconfig)
	p.waitReady(t)
	// The root publisher runs on the leader: once it has published, every
	// part that reads Namespaces has started.
	waitFor(t, 30*time.Second, "istio-ca-root-cert in shop", func() bool {
		_, err := env.Client.CoreV1().ConfigMaps("shop").Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		return err == nil
	})
	time.Sleep(time.Second) // let a late informer show up in the figures
	lists, watches := namespaceCalls(ctx, t, env.Client)
	lists, watches = lists-lists0, watches-watches0
	t.Logf("namespaces requests from discovery serve at start: %d LIST, %d WATCH open", lists, watches)
	if lists > 1 || watches != 1 {
		t.Errorf("discovery serve made %d LIST and holds %d WATCH of namespaces, want at most 1 LIST and 1 WATCH", lists, watches)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}
