package install

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/internal/testenv"
)

// syncBuffer is a progress writer safe to read while Apply writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// playKubelet marks every installer Deployment available, as the
// controller manager and kubelets would: the test cluster runs no pods.
func playKubelet(ctx context.Context, t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	for ctx.Err() == nil {
		list, err := kube.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedByValue})
		if err == nil {
			for i := range list.Items {
				markAvailable(ctx, kube, &list.Items[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func markAvailable(ctx context.Context, kube kubernetes.Interface, d *appsv1.Deployment) {
	if ok, _ := DeploymentAvailable(d); ok {
		return
	}
	n := int32(1)
	if d.Spec.Replicas != nil {
		n = *d.Spec.Replicas
	}
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}},
	}
	_, _ = kube.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
}

func TestBootstrapOnARealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go playKubelet(ctx, t, env.Client)

	progress := &syncBuffer{}
	client, err := NewClient(env.Config, progress)
	if err != nil {
		t.Fatal(err)
	}
	client.PollInterval = 100 * time.Millisecond
	opts := ApplyOptions{Wait: true, ReadinessTimeout: time.Minute}

	// Someone else's object in our namespace: never touched.
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-ours", Namespace: "istio-system"}}
	if _, err := env.Client.CoreV1().ConfigMaps("istio-system").Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	m, err := Render(renderOpts(), Input{Profile: "default"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range client.PreCheck(ctx, m, PreCheckOptions{}) {
		if !r.OK {
			t.Errorf("pre-check failed: %s", r)
		}
	}

	start := time.Now()
	res, err := client.Apply(ctx, m, opts)
	if err != nil {
		t.Fatalf("bootstrap: %v\nprogress:\n%s", err, progress)
	}
	t.Logf("first bootstrap: %s, %d created; progress:\n%s", time.Since(start).Round(time.Millisecond), len(res.Created), progress)
	if len(res.Created) != len(m.Objects()) {
		t.Errorf("created %d objects, rendered %d", len(res.Created), len(m.Objects()))
	}
	for _, want := range []string{"base", "waiting for 15 CRDs to be Established", "waiting for Deployment istio-system/discovery to be available", "gateway-istio-ingressgateway"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q", want)
		}
	}
	assertAllExist(ctx, t, client, m)

	start = time.Now()
	res, err = client.Apply(ctx, m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second bootstrap (no-op): %s", time.Since(start).Round(time.Millisecond))
	if !res.NoChange() {
		t.Errorf("second run changed things: created %v changed %v pruned %v", res.Created, res.Changed, res.Pruned)
	}

	t.Run("check reports each part, with hints", func(t *testing.T) { testCheck(ctx, t, client, m) })
	t.Run("the CRDs validate Istio objects", func(t *testing.T) { testCRDSchemas(ctx, t, client) })
	t.Run("serve reads a VirtualService through the installed CRDs", func(t *testing.T) { testServeReadsVirtualService(ctx, t, env, client.Dynamic) })

	// Gateway off: its objects are pruned, nothing else is.
	noGW, err := Render(renderOpts(), Input{Sets: []string{"components.ingressGateways.[name:istio-ingressgateway].enabled=false"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err = client.Apply(ctx, noGW, opts)
	if err != nil {
		t.Fatal(err)
	}
	gwCount := len(m.Objects()) - len(noGW.Objects())
	if len(res.Pruned) != gwCount || len(res.Created)+len(res.Changed) != 0 {
		t.Errorf("gateway off: pruned %v (want %d), created %v, changed %v", res.Pruned, gwCount, res.Created, res.Changed)
	}
	if _, err := env.Client.AppsV1().Deployments("istio-system").Get(ctx, "istio-ingressgateway", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("gateway Deployment after prune: %v", err)
	}
	// The caBundle the leader patched in (check's subtest) survives a re-apply.
	if mw, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{}); err != nil || len(mw.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Errorf("caBundle lost on re-apply: %v", err)
	}

	// Uninstall: everything but the CRDs goes; --purge takes the CRDs.
	un, err := client.Uninstall(ctx, UninstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(noGW.Objects()) - len(CRDNames(noGW)); len(un.Deleted) != want || len(un.Kept) != 0 {
		t.Errorf("uninstall deleted %d objects, want %d; kept %v", len(un.Deleted), want, un.Kept)
	}
	left, err := client.listManaged(ctx, selector(""), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != len(CRDNames(noGW)) {
		t.Errorf("after uninstall %d managed objects are left, want the %d CRDs", len(left), len(CRDNames(noGW)))
	}
	if _, err := client.Uninstall(ctx, UninstallOptions{Purge: true}); err != nil {
		t.Fatal(err)
	}
	// A CRD goes once the API server has removed its objects (its
	// finalizer): wait for that rather than count at once.
	var left2 int
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		objs, err := client.listManaged(ctx, selector(""), true)
		left2 = len(objs)
		return err == nil && left2 == 0, nil
	}); err != nil {
		t.Errorf("after purge: %d managed objects left", left2)
	}
	if _, err := env.Client.CoreV1().ConfigMaps("istio-system").Get(ctx, "not-ours", metav1.GetOptions{}); err != nil {
		t.Errorf("an object without our labels was touched: %v", err)
	}
}

func assertAllExist(ctx context.Context, t *testing.T, c *Client, m *Manifest) {
	t.Helper()
	for _, o := range m.Objects() {
		ri, err := c.resourceFor(o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s: %v", objectKey(o), err)
			continue
		}
		if got.GetLabels()[LabelRevision] != "default" || got.GetLabels()[LabelComponent] == "" {
			t.Errorf("%s lacks the install labels: %v", objectKey(o), got.GetLabels())
		}
	}
	for _, n := range CRDNames(m) {
		o := &unstructured.Unstructured{}
		o.SetName(n)
		if ok, why, err := c.crdEstablished(ctx, o); !ok || err != nil {
			t.Errorf("CRD %s: %s %v", n, why, err)
		}
	}
	for _, wh := range []string{"istio-sidecar-injector", "istio-validator-istio-system"} {
		if _, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, wh, metav1.GetOptions{}); err != nil {
			if _, err2 := c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, wh, metav1.GetOptions{}); err2 != nil {
				t.Errorf("webhook configuration %s: %v / %v", wh, err, err2)
			}
		}
	}
}

func testCRDSchemas(ctx context.Context, t *testing.T, c *Client) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	tests := map[string]struct {
		resource, doc string
		wantErr       string
	}{
		"accepts a realistic VirtualService (v1)": {resource: "virtualservices", doc: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews.default.svc.cluster.local]
  http:
  - match: [{headers: {end-user: {exact: jason}}, uri: {prefix: /api}}]
    route:
    - destination: {host: reviews, subset: v2, port: {number: 9080}}
      weight: 90
    - destination: {host: reviews, subset: v1}
      weight: 10
    timeout: 2.5s
    retries: {attempts: 3, perTryTimeout: 1s, retryOn: "5xx,reset"}
    fault: {delay: {percentage: {value: 0.1}, fixedDelay: 5s}}`},
		"accepts a realistic DestinationRule (v1alpha3)": {resource: "destinationrules", doc: `
apiVersion: networking.istio.io/v1alpha3
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: 100, connectTimeout: 30ms}, http: {http2MaxRequests: 1000, maxRequestsPerConnection: 10}}
    outlierDetection: {consecutive5xxErrors: 7, interval: 5m, baseEjectionTime: 15m}
    tls: {mode: ISTIO_MUTUAL}
    loadBalancer: {simple: LEAST_REQUEST}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}, trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}}`},
		"accepts a realistic AuthorizationPolicy (v1beta1)": {resource: "authorizationpolicies", doc: `
apiVersion: security.istio.io/v1beta1
kind: AuthorizationPolicy
metadata: {name: httpbin, namespace: default}
spec:
  selector: {matchLabels: {app: httpbin}}
  action: ALLOW
  rules:
  - from: [{source: {principals: ["cluster.local/ns/default/sa/sleep"], notNamespaces: [prod]}}]
    to: [{operation: {methods: [GET], paths: ["/info*"]}}]
    when: [{key: "request.auth.claims[iss]", values: ["https://accounts.example.com"]}]`},
		"accepts an EnvoyFilter (v1alpha3)": {resource: "envoyfilters", doc: `
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua, namespace: default}
spec:
  workloadSelector: {labels: {app: reviews}}
  configPatches:
  - applyTo: HTTP_FILTER
    match: {context: SIDECAR_INBOUND, listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}
    patch:
      operation: INSERT_BEFORE
      value: {name: envoy.lua, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, inlineCode: "x"}}`},
		"accepts a WorkloadGroup (v1)": {resource: "workloadgroups", doc: `
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: vm, namespace: default}
spec:
  metadata: {labels: {app: vm}}
  template: {serviceAccount: vm, network: n1}
  probe: {periodSeconds: 5, httpGet: {path: /ready, port: 8080}}`},
		"accepts a ProxyConfig (v1beta1)": {resource: "proxyconfigs", doc: `
apiVersion: networking.istio.io/v1beta1
kind: ProxyConfig
metadata: {name: pc, namespace: default}
spec: {selector: {matchLabels: {app: reviews}}, concurrency: 2, environmentVariables: {A: b}}`},
		"accepts a WasmPlugin (v1alpha1)": {resource: "wasmplugins", doc: `
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: wp, namespace: default}
spec: {selector: {matchLabels: {app: reviews}}, url: "oci://ghcr.io/example/p:1", phase: AUTHN, priority: 10}`},
		"accepts a TrafficExtension (v1alpha1)": {resource: "trafficextensions", doc: `
apiVersion: extensions.istio.io/v1alpha1
kind: TrafficExtension
metadata: {name: te, namespace: default}
spec: {lua: {inlineCode: "function envoy_on_request(h) end"}}`},
		"accepts a Telemetry (v1)": {resource: "telemetries", doc: `
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: t, namespace: default}
spec: {accessLogging: [{providers: [{name: envoy}]}]}`},
		"refuses an EnvoyFilter with both workloadSelector and targetRefs (CEL)": {resource: "envoyfilters", wantErr: "only one of targetRefs or workloadSelector", doc: `
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: both, namespace: default}
spec:
  workloadSelector: {labels: {app: a}}
  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: g}]`},
		"refuses a WasmPlugin without url": {resource: "wasmplugins", wantErr: "url", doc: `
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: nourl, namespace: default}
spec: {phase: AUTHN}`},
		"refuses a timeout written as a number": {resource: "virtualservices", wantErr: "spec.http[0].timeout", doc: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: bad-timeout, namespace: default}
spec:
  hosts: [reviews]
  http: [{route: [{destination: {host: reviews}}], timeout: 5}]`},
		"refuses maxConnections written as a word": {resource: "destinationrules", wantErr: "maxConnections", doc: `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: bad-pool, namespace: default}
spec:
  host: reviews
  trafficPolicy: {connectionPool: {tcp: {maxConnections: many}}}`},
		"refuses an action that is not one of the enum": {resource: "authorizationpolicies", wantErr: "spec.action", doc: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: bad-action, namespace: default}
spec: {action: PERMIT}`},
		"refuses a route without its required destination host": {resource: "virtualservices", wantErr: "host", doc: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: no-host, namespace: default}
spec:
  hosts: [reviews]
  http: [{route: [{destination: {subset: v1}}]}]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.doc), &obj); err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: obj}
			gv, _ := schema.ParseGroupVersion(u.GetAPIVersion())
			gvr := gv.WithResource(tc.resource)
			_, err := c.Dynamic.Resource(gvr).Namespace("default").Create(ctx, u, metav1.CreateOptions{})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want Invalid mentioning %q", err, tc.wantErr)
			}
		})
	}
}

// pollUntil polls cond every 50ms until it holds or 30s pass.
func pollUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
