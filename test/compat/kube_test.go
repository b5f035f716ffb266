package compat

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// registerBackend creates the namespaces, the client's ServiceAccount, and
// the Service echo (grpc port 7070) with one EndpointSlice endpoint at
// documentationIP:port.
func registerBackend(t *testing.T, kc kubernetes.Interface, port int32) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"istio-system", appNS} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: appSA, Namespace: appNS}}
	if _, err := kc.CoreV1().ServiceAccounts(appNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: appNS},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 7070, TargetPort: intstr.FromInt32(port)}},
		},
	}
	if _, err := kc.CoreV1().Services(appNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, ready := "grpc", true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: appNS, Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{documentationIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	if _, err := kc.DiscoveryV1().EndpointSlices(appNS).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// meshRoot waits for discovery to publish the ConfigMap istio-ca-root-cert
// in the application's namespace and returns its root-cert.pem.
func meshRoot(t *testing.T, kc kubernetes.Interface, serve *child) []byte {
	t.Helper()
	var rootPEM string
	waitFor(t, 30*time.Second, "istio-ca-root-cert in "+appNS, func() bool {
		cm, err := kc.CoreV1().ConfigMaps(appNS).Get(context.Background(), "istio-ca-root-cert", metav1.GetOptions{})
		if err == nil {
			rootPEM = cm.Data["root-cert.pem"]
		}
		return rootPEM != ""
	}, serve)
	return []byte(rootPEM)
}

// saToken is a TokenRequest token of the client's ServiceAccount for the
// audience istio-ca, as the kubelet projects it into a Pod.
func saToken(t *testing.T, kc kubernetes.Interface) string {
	t.Helper()
	exp := int64(43200)
	tr, err := kc.CoreV1().ServiceAccounts(appNS).CreateToken(context.Background(), appSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"istio-ca"}, ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// moveBackend points the EndpointSlice of echo at port.
func moveBackend(t *testing.T, kc kubernetes.Interface, port int32) {
	t.Helper()
	ctx := context.Background()
	es, err := kc.DiscoveryV1().EndpointSlices(appNS).Get(ctx, "echo-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Ports[0].Port = &port
	if _, err := kc.DiscoveryV1().EndpointSlices(appNS).Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
