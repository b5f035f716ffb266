package inject

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"
)

// reportLatency reports the p50 and p99 of the per-operation durations.
func reportLatency(b *testing.B, d []time.Duration) {
	b.Helper()
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkInject measures the pure function: decide, render the sidecar
// template, merge, and build the add-only patch, for the same pod again
// and again (as when a Deployment scales up: its template's parsed output
// is cached).
func BenchmarkInject(b *testing.B) {
	cfg, values := defaults(b)
	pod := readPod(b, "testdata/inject/basic.yaml")
	ns := injectionNamespace()
	orig, _ := json.Marshal(pod)
	d := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		out, _, err := Inject(pod, ns, cfg, values)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := patchFor(orig, out); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	reportLatency(b, d)
}

// BenchmarkInjectDistinctPods is BenchmarkInject with a different pod
// each time (another port), so no rendered template is parsed twice: the
// cost of the first pod of a workload.
func BenchmarkInjectDistinctPods(b *testing.B) {
	cfg, values := defaults(b)
	base := readPod(b, "testdata/inject/basic.yaml")
	ns := injectionNamespace()
	d := make([]time.Duration, 0, b.N)
	port := int32(1000)
	b.ReportAllocs()
	for b.Loop() {
		pod := base.DeepCopy()
		port++
		pod.Spec.Containers[0].Ports[0].ContainerPort = port
		orig, _ := json.Marshal(pod)
		start := time.Now()
		out, _, err := Inject(pod, ns, cfg, values)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := patchFor(orig, out); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	reportLatency(b, d)
}

// BenchmarkInjectHandler measures /inject in process: read and decode the
// AdmissionReview, inject, patch, encode the response.
func BenchmarkInjectHandler(b *testing.B) {
	i, err := New(Options{Namespace: "istio-system"}, fake.NewClientset(namespaces()...), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	h := i.Handler()
	pod := readPod(b, "testdata/inject/basic.yaml")
	pod.Namespace = "" // as in a request for the labelled namespace "mesh"
	body := podReview(b, "mesh", pod)
	d := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		req := httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"patchType":"JSONPatch"`)) {
			b.Fatalf("not injected: %d %s", rec.Code, rec.Body.String())
		}
		d = append(d, time.Since(start))
	}
	reportLatency(b, d)
}
