package main

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
)

const listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"

// applier server-side applies objects, as kubectl apply --server-side
// does, through admission (our validating webhook).
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(env *testenv.Env) *applier {
	dc := memory.NewMemCacheClient(env.Client.Discovery())
	return &applier{dyn: dynamic.NewForConfigOrDie(env.Config), mapper: restmapper.NewDeferredDiscoveryRESTMapper(dc)}
}

func (a *applier) apply(ctx context.Context, t *testing.T, doc string) error {
	t.Helper()
	var u unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	js, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.dyn.Resource(m.Resource).Namespace(u.GetNamespace()).
		Patch(ctx, u.GetName(), types.ApplyPatchType, js, metav1.PatchOptions{FieldManager: "kubectl"})
	return err
}

// listenersOf asks the plaintext xDS port for the listeners of the node id
// with metadata meta, and returns them as JSON.
func listenersOf(ctx context.Context, t *testing.T, addr, id string, meta map[string]any) string {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, err := structpb.NewStruct(meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: id, Metadata: md}, TypeUrl: listenerType}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, a := range resp.Resources {
		var l listenerv3.Listener
		if err := a.UnmarshalTo(&l); err != nil {
			t.Fatal(err)
		}
		// Resolve the typed configs of the filters for the search below.
		js, err := protojson.Marshal(&l)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(js)
	}
	return b.String()
}

// Istio users' YAML, end to end on the real API server through discovery's
// validating webhook: Go-style durations and protocol-less ports are
// accepted; an AuthorizationPolicy allow-list on the ingress gateway is
// RBAC on the gateway's listeners; a CUSTOM policy leaves its workload
// denying, with a condition saying why.
func TestIstioYAMLOnARealAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	go playKubelet(ctx, env)
	out, err := exec.CommandContext(ctx, discoveryBinary(t), "bootstrap", "--profile", "minimal", "-y",
		"--kubeconfig", env.Kubeconfig, "--readiness-timeout", "2m").CombinedOutput()
	if err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}
	webhookAddr, plain := freePort(t), freePort(t)
	pointWebhooksAt(ctx, t, env, "https://"+webhookAddr)
	p := startServe(t, "--kubeconfig", env.Kubeconfig, "--webhook-address", webhookAddr, "--serving-cert-extra-names", "127.0.0.1",
		"--grpc-address", plain)
	p.waitReady(t)
	waitFor(t, 30*time.Second, "the validator's caBundle", func() bool {
		vwc, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "istio-validator-istio-system", metav1.GetOptions{})
		return err == nil && len(vwc.Webhooks) > 0 && len(vwc.Webhooks[0].ClientConfig.CABundle) > 0
	})
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject("shop"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "reviews"}, Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
	}
	if _, err := env.Client.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := newApplier(env)
	// The webhook is in force once it refuses what it must.
	waitFor(t, 30*time.Second, "the webhook refusing a VirtualService without hosts", func() bool {
		err := a.apply(ctx, t, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: probe, namespace: shop}\nspec: {tcp: [{route: [{destination: {host: reviews}}]}]}")
		return err != nil && strings.Contains(err.Error(), "admission webhook")
	})

	t.Run("one object of every Istio kind, in every version its CRD serves, is accepted", func(t *testing.T) {
		applyEveryIstioKind(ctx, t, env, a)
	})
	t.Run("a DestinationRule with Go-style durations is accepted", func(t *testing.T) {
		if err := a.apply(ctx, t, `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews-cb, namespace: shop}
spec:
  host: reviews
  trafficPolicy:
    connectionPool: {tcp: {connectTimeout: 1m30s}}
    outlierDetection: {consecutive5xxErrors: 1, interval: 500ms, baseEjectionTime: 3m, maxEjectionPercent: 100}`); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a ServiceEntry whose ports name no protocol is accepted", func(t *testing.T) {
		if err := a.apply(ctx, t, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: external-db, namespace: shop}
spec:
  hosts: [db.example.com]
  ports: [{number: 5432, name: db}]
  resolution: DNS`); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an allow-list on the ingress gateway is RBAC on its listeners", func(t *testing.T) {
		for _, doc := range []string{`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]`, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ingress-allowlist, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: ALLOW
  rules: [{from: [{source: {remoteIpBlocks: ["203.0.113.0/24"]}}]}]`} {
			if err := a.apply(ctx, t, doc); err != nil {
				t.Fatal(err)
			}
		}
		gw := "router~10.1.0.9~istio-ingressgateway-0.istio-system~istio-system.svc.cluster.local"
		meta := map[string]any{"NAMESPACE": "istio-system", "LABELS": map[string]any{"istio": "ingressgateway"}}
		waitFor(t, 30*time.Second, "the gateway's listener with the allow-list", func() bool {
			ls := listenersOf(ctx, t, plain, gw, meta)
			return strings.Contains(ls, "envoy.filters.http.rbac") && strings.Contains(ls, "203.0.113.0") &&
				strings.Contains(ls, "ns[istio-system]-policy[ingress-allowlist]-rule[0]")
		})
	})

	t.Run("a CUSTOM policy whose provider the MeshConfig lacks leaves its workload denying", func(t *testing.T) {
		// A missing provider is a configuration error, as in istiod: the
		// rules deny and it is logged (gen/authz_custom.go); CUSTOM itself
		// is no longer an unsupported field.
		if err := a.apply(ctx, t, `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext-authz, namespace: shop}
spec:
  selector: {matchLabels: {app: reviews}}
  action: CUSTOM
  provider: {name: opa}
  rules: [{to: [{operation: {paths: ["/admin/*"]}}]}]`); err != nil {
			t.Fatal(err)
		}
		sidecar := "sidecar~10.1.0.7~reviews-0.shop~shop.svc.cluster.local"
		meta := map[string]any{"NAMESPACE": "shop", "LABELS": map[string]any{"app": "reviews"}}
		waitFor(t, 30*time.Second, "the workload's deny rule", func() bool {
			return strings.Contains(listenersOf(ctx, t, plain, sidecar, meta), "istio-ext-authz-opa-ns[shop]-policy[ext-authz]-rule[0]-deny-due-to-bad-CUSTOM-action")
		})
	})
}

// applyEveryIstioKind applies, through the validating webhook, one object
// of every kind whose CRD bootstrap installed in an Istio group
// (kubetest.ValidSpecs), in every version the CRD serves (issue 18:
// bootstrap, then kubectl apply of any Istio object, succeeds).
func applyEveryIstioKind(ctx context.Context, t *testing.T, env *testenv.Env, a *applier) {
	t.Helper()
	crds, err := apiextclient.NewForConfigOrDie(env.Config).ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kinds, applied := map[string]bool{}, 0
	for _, crd := range crds.Items {
		if !strings.HasSuffix(crd.Spec.Group, ".istio.io") {
			continue
		}
		kind := crd.Spec.Names.Kind
		kinds[kind] = true
		spec, ok := kubetest.ValidSpecs[kind]
		if !ok {
			t.Errorf("bootstrap installed %s, for which the test has no object", kind)
			continue
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			name := strings.ToLower(kind) + "-" + v.Name
			doc := "apiVersion: " + crd.Spec.Group + "/" + v.Name + "\nkind: " + kind + "\nmetadata: {name: " + name + ", namespace: shop}\nspec: " + spec
			if err := a.apply(ctx, t, doc); err != nil {
				t.Errorf("%s/%s %s: %v", crd.Spec.Group, v.Name, kind, err)
			}
			applied++
		}
	}
	for kind := range kubetest.ValidSpecs {
		if !kinds[kind] {
			t.Errorf("bootstrap installed no CRD for %s", kind)
		}
	}
	t.Logf("%d objects of %d kinds applied", applied, len(kinds))
}
