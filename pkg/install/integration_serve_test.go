package install

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/model"
)

// testServeReadsVirtualService runs discovery's Kubernetes source (what
// `discovery serve --kubeconfig` runs) against the API server after
// bootstrap, creates a VirtualService from YAML, and waits until it is in
// the World: the CRDs the chart installed are the ones serve watches.
func testServeReadsVirtualService(ctx context.Context, t *testing.T, env *testenv.Env, dyn dynamic.Interface) { //nolint:thelper // a subtest's body, not a helper: a failure points into it
	ctx, cancel := context.WithCancel(ctx)
	src, err := kube.New(env.Config, kube.DefaultOptions(), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore(model.StoreOptions{DomainSuffix: "cluster.local"})
	done := make(chan error, 1)
	go func() { done <- src.Start(ctx, store) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source: %v", err)
		}
	}()
	pollUntil(ctx, t, "the source to sync", src.HasSynced)

	var obj map[string]any
	doc := `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings, namespace: default}
spec:
  hosts: [ratings.default.svc.cluster.local]
  http: [{route: [{destination: {host: ratings.default.svc.cluster.local}}]}]`
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}
	if _, err := dyn.Resource(gvr).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pollUntil(ctx, t, "the VirtualService in the World", func() bool {
		return store.World().Config(model.KindVirtualService, "default", "ratings") != nil
	})
}
