package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func start(t *testing.T) (*Server, string, string) {
	t.Helper()
	return startWith(t, Options{Addr: "127.0.0.1:0", ReadyAddr: "127.0.0.1:0"})
}

func startWith(t *testing.T, opts Options) (*Server, string, string) {
	t.Helper()
	s := New(opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start = %v", err)
		}
	})
	mon, rdy, err := s.Addrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s, "http://" + mon.String(), "http://" + rdy.String()
}

func TestReadyAnswers503UntilEveryCheckPasses(t *testing.T) {
	s, _, rdy := start(t)
	var kubeSynced, fileSynced atomic.Bool
	s.AddReadyCheck("kube", func() error {
		if !kubeSynced.Load() {
			return errors.New("not synced")
		}
		return nil
	})
	s.AddReadyCheck("file", func() error {
		if !fileSynced.Load() {
			return errors.New("not synced")
		}
		return nil
	})
	if code, body := get(t, rdy+"/ready"); code != http.StatusServiceUnavailable || !strings.Contains(body, "kube: not synced") {
		t.Fatalf("before sync: %d %q", code, body)
	}
	kubeSynced.Store(true)
	if code, body := get(t, rdy+"/ready"); code != http.StatusServiceUnavailable || strings.Contains(body, "kube") {
		t.Fatalf("one synced: %d %q", code, body)
	}
	fileSynced.Store(true)
	if code, _ := get(t, rdy+"/ready"); code != http.StatusOK {
		t.Fatalf("all synced: %d", code)
	}
	if code, _ := get(t, rdy+"/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
}

func TestMetricsAndDebugEndpoints(t *testing.T) {
	s, mon, _ := start(t)
	store := model.NewStore(model.StoreOptions{})
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"}}
	vs.Spec.Hosts = []string{"reviews"}
	_, err := store.Apply(
		model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindService, Namespace: "shop", Name: "reviews"}, Object: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
		}},
		model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: "shop", Name: "reviews"}, Object: vs},
	)
	if err != nil {
		t.Fatal(err)
	}
	s.HandleDebug("registryz", RegistryzHandler(store.World))
	s.HandleDebug("configz", ConfigzHandler(store.World))

	if code, body := get(t, mon+"/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_cpu_seconds_total") {
		t.Errorf("/metrics: %d, go and process collectors missing", code)
	}
	_, body := get(t, mon+"/debug/registryz")
	// As istiod's: an array of services in its model.Service's shape
	// (the keys Kiali reads), with discovery's endpoints besides.
	var reg []struct {
		Hostname   string `json:"hostname"`
		Attributes struct {
			ServiceRegistry, Name, Namespace string
		}
		Ports []struct {
			Name     string `json:"name"`
			Port     int    `json:"port"`
			Protocol string `json:"protocol"`
		} `json:"ports"`
		ClusterVIPs struct {
			Addresses map[string][]string
		} `json:"clusterVIPs"`
		Endpoints []json.RawMessage `json:"endpoints"`
	}
	if err := json.Unmarshal([]byte(body), &reg); err != nil || len(reg) != 1 || reg[0].Hostname != "reviews.shop.svc.cluster.local" ||
		reg[0].Attributes.ServiceRegistry != "Kubernetes" || reg[0].Attributes.Name != "reviews" || reg[0].Attributes.Namespace != "shop" ||
		len(reg[0].Ports) != 1 || reg[0].Ports[0].Port != 9080 || reg[0].Ports[0].Protocol != "HTTP" || reg[0].Endpoints == nil {
		t.Errorf("/debug/registryz = %s (%v)", body, err)
	}
	_, body = get(t, mon+"/debug/configz")
	// As istiod's: an array of Kubernetes objects.
	var cfg []struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Hosts []string `json:"hosts"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(body), &cfg); err != nil || len(cfg) != 1 ||
		cfg[0].Kind != "VirtualService" || cfg[0].APIVersion != "networking.istio.io/v1" || cfg[0].Spec.Hosts[0] != "reviews" {
		t.Errorf("/debug/configz = %s (%v)", body, err)
	}
	if _, body := get(t, mon+"/debug"); !strings.Contains(body, "/debug/configz") {
		t.Errorf("/debug index = %q", body)
	}
}

func TestConfigzNotes(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	for _, name := range []string{"a", "b"} {
		vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}}
		if _, err := store.Apply(model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: "shop", Name: name}, Object: vs}); err != nil {
			t.Fatal(err)
		}
	}
	onlyA := func(c *model.Config) (string, any, bool) {
		return "note", map[string]string{"for": c.Key.Name}, c.Key.Name == "a"
	}
	rec := httptest.NewRecorder()
	ConfigzHandler(store.World, onlyA).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/configz", nil))
	var got []map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || len(got) != 2 {
		t.Fatalf("configz = %s (%v)", rec.Body, err)
	}
	var note map[string]string
	if err := json.Unmarshal(got[0]["note"], &note); err != nil || note["for"] != "a" || got[0]["kind"] == nil || got[0]["metadata"] == nil {
		t.Errorf("a: %s", rec.Body)
	}
	if _, ok := got[1]["note"]; ok {
		t.Errorf("b got a note its function declined: %s", rec.Body)
	}
}
