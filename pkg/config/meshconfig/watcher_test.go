package meshconfig

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func configMap(ns, name, rv string, data map[string]string) model.Event {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}, Data: data}
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindConfigMap, Namespace: ns, Name: name}, Object: cm}
}

func newWatcher(t *testing.T, opts Options) (*Watcher, *model.Store, *prometheus.Registry) {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = "istio-system"
	}
	store := model.NewStore(model.StoreOptions{})
	reg := prometheus.NewRegistry()
	w, err := New(opts, store, quiet(), reg)
	if err != nil {
		t.Fatal(err)
	}
	return w, store, reg
}

func TestWatcherAppliesTheMeshConfigMap(t *testing.T) {
	w, store, _ := newWatcher(t, Options{})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}}
	if _, err := w.Apply(
		configMap("istio-system", "istio", "1", map[string]string{"mesh": "accessLogFile: /dev/stdout\nrootNamespace: mesh-root\n"}),
		configMap("istio-system", "istio-sidecar-injector", "1", map[string]string{"mesh": "rootNamespace: wrong\n"}),
		configMap("other", "istio", "1", map[string]string{"mesh": "rootNamespace: wrong\n"}),
		model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindService, Namespace: "default", Name: "a"}, Object: svc},
	); err != nil {
		t.Fatal(err)
	}
	world := store.World()
	if got := world.Mesh().RootNamespace(); got != "mesh-root" {
		t.Errorf("root namespace %q; other ConfigMaps must not count", got)
	}
	if file, _, _ := world.Mesh().AccessLog(); file != "/dev/stdout" {
		t.Errorf("access log %q", file)
	}
	if world.Service("default", "a") == nil {
		t.Error("the Service in the same batch did not pass through")
	}
	if !strings.Contains(w.Status().Source, "resourceVersion 1") {
		t.Errorf("source %q", w.Status().Source)
	}
}

func TestWatcherKeepsTheLastGoodMeshConfig(t *testing.T) {
	w, store, reg := newWatcher(t, Options{})
	if _, err := w.Apply(configMap("istio-system", "istio", "1", map[string]string{"mesh": "connectTimeout: 3s\n"})); err != nil {
		t.Fatal(err)
	}
	version := store.World().Version
	if _, err := w.Apply(configMap("istio-system", "istio", "2", map[string]string{"mesh": "connectTimeout: 0s\n"})); err != nil {
		t.Fatal(err)
	}
	if store.World().Version != version || store.World().Mesh().ConnectTimeout() != 3*time.Second {
		t.Errorf("an invalid MeshConfig changed the World: connect timeout %v", store.World().Mesh().ConnectTimeout())
	}
	st := w.Status()
	if st.Refused == nil || !strings.Contains(st.Refused.Error, "connect timeout") || !strings.Contains(st.Refused.Source, "resourceVersion 2") {
		t.Errorf("refusal not shown: %+v", st.Refused)
	}
	if !strings.Contains(st.Source, "resourceVersion 1") {
		t.Errorf("in force: %q", st.Source)
	}
	if got := testutil.ToFloat64(w.metrics.invalid); got != 1 {
		t.Errorf("discovery_mesh_config_invalid = %v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "discovery_mesh_config_reloads_total"); err != nil || n != 2 {
		t.Errorf("reload series %d, %v", n, err)
	}
	// Fixing it clears the refusal.
	if _, err := w.Apply(configMap("istio-system", "istio", "3", map[string]string{"mesh": "connectTimeout: 4s\n"})); err != nil {
		t.Fatal(err)
	}
	if store.World().Mesh().ConnectTimeout() != 4*time.Second || w.Status().Refused != nil || testutil.ToFloat64(w.metrics.invalid) != 0 {
		t.Errorf("fix not applied: %v, %+v", store.World().Mesh().ConnectTimeout(), w.Status().Refused)
	}
}

func TestWatcherFallsBackToDefaultsWhenTheConfigMapGoes(t *testing.T) {
	w, store, _ := newWatcher(t, Options{Revision: "canary"})
	if got := (&Options{Revision: "canary"}).ConfigMapName(); got != "istio-canary" {
		t.Fatalf("name %q", got)
	}
	if _, err := w.Apply(configMap("istio-system", "istio", "1", map[string]string{"mesh": "rootNamespace: not-mine\n"})); err != nil {
		t.Fatal(err)
	}
	if store.World().Mesh().RootNamespace() != "istio-system" {
		t.Error("a revision read the default revision's ConfigMap")
	}
	if _, err := w.Apply(configMap("istio-system", "istio-canary", "1", map[string]string{"mesh": "rootNamespace: mine\n"})); err != nil {
		t.Fatal(err)
	}
	if store.World().Mesh().RootNamespace() != "mine" {
		t.Fatal("the revision's ConfigMap was not applied")
	}
	if _, err := w.Apply(model.Event{Op: model.OpDelete, Key: model.Key{Kind: model.KindConfigMap, Namespace: "istio-system", Name: "istio-canary"}}); err != nil {
		t.Fatal(err)
	}
	if store.World().Mesh().RootNamespace() != "istio-system" {
		t.Error("a deleted ConfigMap left its MeshConfig in force; Istio's defaults apply")
	}
	// A ConfigMap without the mesh key is Istio's defaults too.
	if _, err := w.Apply(configMap("istio-system", "istio-canary", "2", map[string]string{"meshNetworks": "networks: {}"})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.Status().Source, "no mesh key") {
		t.Errorf("source %q", w.Status().Source)
	}
}

func TestWatcherReportsIgnoredFieldsAndTheTrustDomain(t *testing.T) {
	w, _, _ := newWatcher(t, Options{TrustDomain: "cluster.local", TrustDomainFlag: true})
	if _, err := w.Apply(configMap("istio-system", "istio", "1", map[string]string{"mesh": "trustDomain: example.org\ningressClass: nginx\nbogus: 1\n"})); err != nil {
		t.Fatal(err)
	}
	st := w.Status()
	var paths []string
	for _, f := range st.Ignored {
		paths = append(paths, f.Path)
		if f.Path == "trustDomain" && !strings.Contains(f.Reason, "--trust-domain") {
			t.Errorf("trust domain reason %q", f.Reason)
		}
	}
	if got := strings.Join(paths, ","); got != "bogus,ingressClass,trustDomain" {
		t.Errorf("ignored %s", got)
	}
	if got := testutil.ToFloat64(w.metrics.ignored.WithLabelValues("ingressClass")); got != 1 {
		t.Errorf("ignored gauge %v", got)
	}
	// /debug/meshz shows the MeshConfig in force with Istio's defaults.
	rec := httptest.NewRecorder()
	w.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/meshz", nil))
	var body struct {
		MeshConfig map[string]any `json:"meshConfig"`
		Ignored    []any          `json:"ignored"`
		Precedence string         `json:"precedence"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body.MeshConfig["trustDomain"] != "example.org" || body.MeshConfig["connectTimeout"] != "10s" || len(body.Ignored) != 3 || body.Precedence == "" {
		t.Errorf("meshz %s", rec.Body.String())
	}
}

func TestMeshConfigFileWinsAndIsWatched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(path, []byte("rootNamespace: from-file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, store, _ := newWatcher(t, Options{File: path})
	src, err := NewFileSource(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Start(ctx, w) }()
	defer func() { cancel(); <-done }()
	eventually(t, "the file's MeshConfig", func() bool { return store.World().Mesh().RootNamespace() == "from-file" })
	if !src.HasSynced() {
		t.Error("not synced after the first read")
	}
	// The ConfigMap is not read while the file is given.
	if _, err := w.Apply(configMap("istio-system", "istio", "1", map[string]string{"mesh": "rootNamespace: from-configmap\n"})); err != nil {
		t.Fatal(err)
	}
	if store.World().Mesh().RootNamespace() != "from-file" || !strings.Contains(w.Status().Shadowed, "ConfigMap istio-system/istio") {
		t.Errorf("ConfigMap applied over the file, or not shown as shadowed: %q", w.Status().Shadowed)
	}
	// An atomic replace (write elsewhere, rename) is read.
	tmp := filepath.Join(dir, ".mesh.yaml.tmp")
	if err := os.WriteFile(tmp, []byte("rootNamespace: renamed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replaced file's MeshConfig", func() bool { return store.World().Mesh().RootNamespace() == "renamed" })
	// An invalid edit keeps the last good one; removing the file too.
	if err := os.WriteFile(path, []byte("connectTimeout: -1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the refusal", func() bool { return w.Status().Refused != nil })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if store.World().Mesh().RootNamespace() != "renamed" {
		t.Errorf("root namespace %q after an invalid edit and a removal", store.World().Mesh().RootNamespace())
	}
}

func TestReadInitialFindsTheConfigMapInAConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	doc := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\ndata:\n  mesh: |\n    trustDomain: example.org\n"
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := ReadInitial(context.Background(), Options{Namespace: "istio-system"}, nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Found || !strings.Contains(in.Text, "example.org") {
		t.Errorf("initial %+v", in)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
