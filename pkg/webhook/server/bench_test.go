package server

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshplane/discovery/pkg/webhook/inject"
)

// BenchmarkInjectHTTPS measures /inject as the API server sees it: one
// AdmissionReview POSTed over TLS on loopback (keep-alive connection) to
// the real server and injector, until the response is read.
func BenchmarkInjectHTTPS(b *testing.B) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh", Labels: map[string]string{inject.NamespaceInjectionLabel: "enabled"}}}
	inj, err := inject.New(inject.Options{Namespace: "istio-system"}, fake.NewClientset(ns), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ca := newTestCA(b)
	base := runServer(b, ca, inj.Handler(), nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := benchReview(b)
	d := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		res, err := client.Post(base+"/inject", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"patchType":"JSONPatch"`)) {
			b.Fatalf("not injected: %d %s", res.StatusCode, out)
		}
		d = append(d, time.Since(start))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

func benchReview(b *testing.B) []byte {
	b.Helper()
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "reviews-", Labels: map[string]string{"app": "reviews", "version": "v1"}},
		Spec: corev1.PodSpec{ServiceAccountName: "reviews", Containers: []corev1.Container{{
			Name: "reviews", Image: "example/reviews:1", Ports: []corev1.ContainerPort{{ContainerPort: 9080, Name: "http"}},
		}}},
	}
	raw, _ := json.Marshal(pod)
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "bench", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "mesh",
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return body
}
