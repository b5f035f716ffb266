package status

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	gw "sigs.k8s.io/gateway-api/apis/v1"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/credentials"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// testCertificate returns a self-signed PEM certificate and key.
func testCertificate(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "example.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TestIntegrationGatewayAPIReferences runs the leader's status writer
// against a real API server, with certificateRefs judged through the
// credentials' Secret informer wired as cmd/discovery wires it: a
// listener whose Secret does not exist yet is InvalidCertificateRef and
// becomes ResolvedRefs=True when the Secret is created; one naming
// another namespace's Secret is RefNotPermitted until a ReferenceGrant
// allows it; a malformed Secret is InvalidCertificateRef; an HTTPRoute
// whose parentRef names no listener (sectionName, port) gets
// NoMatchingParent, one of a namespace the listener does not admit
// NotAllowedByListeners; each listener counts only what attached.
func TestIntegrationGatewayAPIReferences(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	kubetest.InstallGatewayAPICRDs(ctx, t, apiextclient.NewForConfigOrDie(env.Config))
	gc := gatewayclient.NewForConfigOrDie(env.Config)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"shop", "certs", "other"} {
		_, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		must(err)
	}
	crt, key := testCertificate(t)
	secret := func(ns, name string, crt, key []byte) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": crt, "tls.key": key},
		}
	}
	_, err := env.Client.CoreV1().Secrets("certs").Create(ctx, secret("certs", "cert", crt, key), metav1.CreateOptions{})
	must(err)
	_, err = env.Client.CoreV1().Secrets("shop").Create(ctx, secret("shop", "malformed", []byte("Hello world\n"), []byte("Hello world\n")), metav1.CreateOptions{})
	must(err)
	_, err = gc.GatewayV1().GatewayClasses().Create(ctx, &gw.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "istio"},
		Spec:       gw.GatewayClassSpec{ControllerName: gatewayapi.ControllerName},
	}, metav1.CreateOptions{})
	must(err)
	certsNS := gw.Namespace("certs")
	https := func(name, host string, ref gw.SecretObjectReference) gw.Listener {
		h := gw.Hostname(host)
		return gw.Listener{
			Name: gw.SectionName(name), Port: 443, Protocol: gw.HTTPSProtocolType, Hostname: &h,
			TLS: &gw.ListenerTLSConfig{CertificateRefs: []gw.SecretObjectReference{ref}},
		}
	}
	_, err = gc.GatewayV1().Gateways("shop").Create(ctx, &gw.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "shop"},
		Spec: gw.GatewaySpec{GatewayClassName: "istio", Listeners: []gw.Listener{
			{Name: "http", Port: 80, Protocol: gw.HTTPProtocolType},
			https("later", "a.example.com", gw.SecretObjectReference{Name: "later"}),
			https("cross", "b.example.com", gw.SecretObjectReference{Name: "cert", Namespace: &certsNS}),
			https("malformed", "c.example.com", gw.SecretObjectReference{Name: "malformed"}),
		}},
	}, metav1.CreateOptions{})
	must(err)
	route := func(ns, name string, p gw.ParentReference) {
		t.Helper()
		shop := gw.Namespace("shop")
		p.Name, p.Namespace = "gw", &shop
		_, err := gc.GatewayV1().HTTPRoutes(ns).Create(ctx, &gw.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       gw.HTTPRouteSpec{CommonRouteSpec: gw.CommonRouteSpec{ParentRefs: []gw.ParentReference{p}}},
		}, metav1.CreateOptions{})
		must(err)
	}
	nope, port := gw.SectionName("nope"), gw.PortNumber(8080)
	http := gw.SectionName("http")
	route("shop", "no-such-section", gw.ParentReference{SectionName: &nope})
	route("shop", "no-such-port", gw.ParentReference{Port: &port})
	route("other", "not-allowed", gw.ParentReference{SectionName: &http})
	route("shop", "attached", gw.ParentReference{SectionName: &http})

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := model.NewStore(model.StoreOptions{})
	src, err := kube.New(env.Config, kube.DefaultOptions(), log, prometheus.NewRegistry())
	must(err)
	creds, err := credentials.NewKube(env.Client, log, prometheus.NewRegistry())
	must(err)
	// As cmd/discovery's gatewayCredentials.
	store.SetSecrets(creds.CertificateState)
	creds.OnChange(func(ns, name string) { store.SecretChanged(ns, name) })
	creds.OnPresence(func(ns, name string) { store.SecretChanged(ns, name) })
	background(t, func(ctx context.Context) error {
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), creds.HasSynced) {
				store.SecretChanged("", "")
			}
		}()
		return creds.Start(ctx)
	})
	a, err := NewAuditor(DefaultOptions(), store.World, NewKubeWriter(dynamic.NewForConfigOrDie(env.Config), env.Client), log, prometheus.NewRegistry())
	must(err)
	store.Subscribe(a.Observe)
	background(t, func(ctx context.Context) error { return src.Start(ctx, store) })
	background(t, a.Start)
	background(t, a.Lead)

	cond := func(conds []metav1.Condition, typ string) string {
		for _, c := range conds {
			if c.Type == typ {
				return fmt.Sprintf("%s/%s", c.Status, c.Reason)
			}
		}
		return "none"
	}
	// listeners returns "name:ResolvedRefs:Programmed:attached" per listener.
	listeners := func() string {
		g, err := gc.GatewayV1().Gateways("shop").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, l := range g.Status.Listeners {
			out = append(out, fmt.Sprintf("%s:%s:%s:%d", l.Name, cond(l.Conditions, "ResolvedRefs"), cond(l.Conditions, "Programmed"), l.AttachedRoutes))
		}
		return strings.Join(out, " ")
	}
	waitListeners := func(what, want string) {
		t.Helper()
		poll(t, what, 30*time.Second, func() (bool, string) { got := listeners(); return got == want, got })
	}
	waitListeners("a missing Secret, a cross-namespace one without a ReferenceGrant and a malformed one reported",
		"http:True/ResolvedRefs:True/Programmed:1 "+
			"later:False/InvalidCertificateRef:False/Invalid:0 "+
			"cross:False/RefNotPermitted:False/Invalid:0 "+
			"malformed:False/InvalidCertificateRef:False/Invalid:0")
	for _, c := range []struct{ ns, name, want string }{
		{"shop", "no-such-section", "False/NoMatchingParent"},
		{"shop", "no-such-port", "False/NoMatchingParent"},
		{"other", "not-allowed", "False/NotAllowedByListeners"},
		{"shop", "attached", "True/Accepted"},
	} {
		poll(t, "route "+c.ns+"/"+c.name+" "+c.want, 30*time.Second, func() (bool, string) {
			r, err := gc.GatewayV1().HTTPRoutes(c.ns).Get(ctx, c.name, metav1.GetOptions{})
			if err != nil || len(r.Status.Parents) != 1 {
				return false, fmt.Sprint(err, r.Status.Parents)
			}
			got := cond(r.Status.Parents[0].Conditions, "Accepted")
			return got == c.want, got
		})
	}

	// The Secret appears; the ReferenceGrant is created.
	_, err = env.Client.CoreV1().Secrets("shop").Create(ctx, secret("shop", "later", crt, key), metav1.CreateOptions{})
	must(err)
	_, err = gc.GatewayV1beta1().ReferenceGrants("certs").Create(ctx, &gwv1beta1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Name: "gateways", Namespace: "certs"},
		Spec: gwv1beta1.ReferenceGrantSpec{
			From: []gwv1beta1.ReferenceGrantFrom{{Group: gw.GroupName, Kind: "Gateway", Namespace: "shop"}},
			To:   []gwv1beta1.ReferenceGrantTo{{Group: "", Kind: "Secret"}},
		},
	}, metav1.CreateOptions{})
	must(err)
	waitListeners("the created Secret and the ReferenceGrant resolve their listeners",
		"http:True/ResolvedRefs:True/Programmed:1 "+
			"later:True/ResolvedRefs:True/Programmed:0 "+
			"cross:True/ResolvedRefs:True/Programmed:0 "+
			"malformed:False/InvalidCertificateRef:False/Invalid:0")
	// The Secret goes again.
	must(env.Client.CoreV1().Secrets("shop").Delete(ctx, "later", metav1.DeleteOptions{}))
	waitListeners("a deleted Secret reported again",
		"http:True/ResolvedRefs:True/Programmed:1 "+
			"later:False/InvalidCertificateRef:False/Invalid:0 "+
			"cross:True/ResolvedRefs:True/Programmed:0 "+
			"malformed:False/InvalidCertificateRef:False/Invalid:0")
}
