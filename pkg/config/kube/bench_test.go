package kube

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apiextfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/meshplane/discovery/pkg/model"
)

// BenchmarkInitialSync measures start-up to HasSynced over a fake API
// holding 500 Services, each with one EndpointSlice of 3 Pods: how long the
// initial list takes to reach a real Store, and in how many batches.
func BenchmarkInitialSync(b *testing.B) {
	const services, podsPer = 500, 3
	var objs []runtime.Object
	for i := range services {
		ns, svc := fmt.Sprintf("ns-%d", i%20), fmt.Sprintf("svc-%d", i)
		objs = append(objs, newService(ns, svc))
		for j := range podsPer {
			pod, ip := fmt.Sprintf("%s-%d", svc, j), fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)
			objs = append(objs, fullPodNamed(ns, pod, ip), testSlice(ns, fmt.Sprintf("%s-%d", svc, j), svc, ip, pod))
		}
	}
	kube := kubefake.NewClientset(objs...)
	clients := Clients{Kube: kube, Istio: newIstioFake(), CRDs: apiextfake.NewClientset()}
	log := testLogger(b)
	var applies, events float64
	b.ReportAllocs()
	for b.Loop() {
		reg := prometheus.NewRegistry()
		src, err := NewForClients(clients, DefaultOptions(), log, reg)
		if err != nil {
			b.Fatal(err)
		}
		store := model.NewStore(model.StoreOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- src.Start(ctx, store) }()
		for !src.HasSynced() {
			time.Sleep(time.Millisecond)
		}
		if n := store.World().ServiceCount(); n != services {
			b.Fatalf("%d services after sync, want %d", n, services)
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		var m dto.Metric
		if err := src.metrics.batchSize.Write(&m); err != nil {
			b.Fatal(err)
		}
		applies += float64(m.GetHistogram().GetSampleCount())
		events += m.GetHistogram().GetSampleSum()
	}
	b.ReportMetric(events/applies, "events/apply")
}

func fullPodNamed(ns, name, ip string) *corev1.Pod {
	p := fullPod()
	p.Namespace, p.Name = ns, name
	p.Status.PodIP = ip
	p.Status.PodIPs[0].IP = ip
	p.ManagedFields = nil
	return p
}
