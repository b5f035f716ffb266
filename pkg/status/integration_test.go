package status

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/server"
)

const proxyID = "sidecar~10.0.0.9~client.shop~shop.svc.cluster.local"

// background runs start until the test ends.
func background(t *testing.T, start func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func poll(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last: %s", what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestIntegrationNACKReportedOnVirtualService(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	kubetest.InstallCRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config), model.KindVirtualService)
	istio := istioclient.NewForConfigOrDie(env.Config)
	c := env.Client.CoreV1()
	if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "reviews"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vs := &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"},
		Spec: networkingapi.VirtualService{Hosts: []string{"reviews"}, Http: []*networkingapi.HTTPRoute{{
			Timeout: durationpb.New(3 * time.Second),
			Route:   []*networkingapi.HTTPRouteDestination{{Destination: &networkingapi.Destination{Host: "reviews"}}},
		}}},
	}
	vs, err := istio.NetworkingV1().VirtualServices("shop").Create(ctx, vs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	background(t, func(ctx context.Context) error { return src.Start(ctx, store) })
	poll(t, "the VirtualService in the World", 30*time.Second, func() (bool, string) {
		return len(store.World().Configs(model.KindVirtualService)) == 1, "not yet"
	})

	reg := prometheus.NewRegistry()
	opts := server.DefaultOptions()
	opts.DebounceAfter, opts.DebounceMax = 10*time.Millisecond, time.Second
	xds, err := server.New(opts, store, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := New(DefaultOptions(), NewKubeWriter(dynamic.NewForConfigOrDie(env.Config), env.Client), log, reg)
	if err != nil {
		t.Fatal(err)
	}
	xds.SetObserver(rep)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	xds.Register(gs)
	served := make(chan struct{})
	go func() { _ = gs.Serve(lis); close(served) }()
	t.Cleanup(func() { gs.Stop(); <-served })
	background(t, xds.Start)
	background(t, rep.Start)

	cl := newADSClient(t, lis.Addr().String())
	route := gen.RouteName(model.Hostname("reviews", "shop", "cluster.local"), 80)
	cl.send(route, "", "", "")
	r1 := cl.next()
	if len(r1.GetResources()) != 1 {
		t.Fatalf("RDS response has %d resources, want %s", len(r1.GetResources()), route)
	}
	cl.send(route, "", r1.GetNonce(), "Proto constraint validation failed (RouteValidationError.Timeout: test)")

	vsClient := istio.NetworkingV1().VirtualServices("shop")
	condition := func(status string) func() (bool, string) {
		return func() (bool, string) {
			u, err := dynamic.NewForConfigOrDie(env.Config).Resource(model.KindVirtualService.GroupVersionResource()).
				Namespace("shop").Get(ctx, "reviews", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			conds, _, _ := unstructuredConditions(u.Object)
			for _, c := range conds {
				if c["type"] == ConditionType && c["status"] == status {
					msg, _ := c["message"].(string)
					return strings.Contains(msg, proxyID), msg
				}
			}
			return false, "conditions " + strings.Join(conditionTypes(conds), ",")
		}
	}
	poll(t, "the ProxyRejected condition True naming the proxy", 30*time.Second, condition("True"))
	poll(t, "a Warning Event naming the proxy and Envoy's error", 30*time.Second, func() (bool, string) {
		evs, err := c.Events("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == EventReason && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == "reviews" &&
				e.InvolvedObject.Kind == "VirtualService" && e.InvolvedObject.UID == vs.UID &&
				strings.Contains(e.Message, proxyID) && strings.Contains(e.Message, "RouteValidationError") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})

	// A new generation, accepted by the proxy, clears the condition.
	cur, err := vsClient.Get(ctx, "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Http[0].Timeout = durationpb.New(5 * time.Second)
	if _, err := vsClient.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r2 := cl.next()
	cl.send(route, r2.GetVersionInfo(), r2.GetNonce(), "")
	poll(t, "the ProxyRejected condition False after the ACK of generation 2", 30*time.Second, condition("False"))
}

type adsClient struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	recv   chan *discovery.DiscoveryResponse
	node   *corev3.Node
}

func newADSClient(t *testing.T, addr string) *adsClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"ISTIO_VERSION": "1.32.0"})
	c := &adsClient{t: t, stream: stream, recv: make(chan *discovery.DiscoveryResponse, 16), node: &corev3.Node{Id: proxyID, Metadata: md}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			c.recv <- r
		}
	}()
	t.Cleanup(func() { cancel(); <-done; _ = cc.Close() })
	return c
}

func (c *adsClient) send(route, version, nonce, nack string) {
	c.t.Helper()
	req := &discovery.DiscoveryRequest{Node: c.node, TypeUrl: gen.RouteType, ResourceNames: []string{route}, VersionInfo: version, ResponseNonce: nonce}
	if nack != "" {
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: nack}
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

func (c *adsClient) next() *discovery.DiscoveryResponse {
	c.t.Helper()
	select {
	case r := <-c.recv:
		return r
	case <-time.After(30 * time.Second):
		c.t.Fatal("no xDS response within 30s")
	}
	return nil
}

// unstructuredConditions returns status.conditions of an unstructured
// object as maps.
func unstructuredConditions(obj map[string]any) ([]map[string]any, bool, error) {
	list, ok, err := unstructured.NestedSlice(obj, "status", "conditions")
	if err != nil || !ok {
		return nil, ok, err
	}
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out, true, nil
}

func conditionTypes(conds []map[string]any) []string {
	out := make([]string, 0, len(conds))
	for _, c := range conds {
		out = append(out, fmt.Sprint(c["type"], "=", c["status"]))
	}
	return out
}
