package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

// serve starts against a cluster that has no Istio CRDs: it is ready
// anyway, and serves a VirtualService once its CRD is created.
func TestServeStartsBeforeIstioCRDsAndPicksThemUp(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject("istio-system"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject("shop"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
	}
	if _, err := env.Client.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "--kubeconfig", env.Kubeconfig)
	p.waitReady(t)
	debug := func(path string) string {
		_, body, _ := httpGet("http://" + p.monitor + path)
		return body
	}
	waitFor(t, 10*time.Second, "the Service in /debug/registryz", func() bool {
		return strings.Contains(debug("/debug/registryz"), "reviews.shop.svc.cluster.local")
	})

	ext, err := apiextclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	kubetest.InstallCRDs(ctx, t, ext, model.KindVirtualService)
	istio, err := istioclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "reviews-route", Namespace: "shop"}}
	vs.Spec.Hosts = []string{"reviews"}
	if _, err := istio.NetworkingV1().VirtualServices("shop").Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the VirtualService in /debug/configz", func() bool {
		return strings.Contains(debug("/debug/configz"), "reviews-route")
	})
	if code, _, _ := httpGet("http://" + p.readiness + "/ready"); code != http.StatusOK {
		t.Errorf("/ready = %d after the CRD appeared", code)
	}
	// The root certificate is published by the leader.
	waitFor(t, 20*time.Second, "istio-ca-root-cert in shop", func() bool {
		cm, err := env.Client.CoreV1().ConfigMaps("shop").Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
		return err == nil && strings.Contains(cm.Data["root-cert.pem"], "BEGIN CERTIFICATE")
	})
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
}
