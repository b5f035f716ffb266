package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
)

const secretType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

// sdsSecrets opens an ADS stream on conn as a gateway of ns, asks for the
// SDS Secret name and returns the Secrets of the first response.
func sdsSecrets(t *testing.T, conn *grpc.ClientConn, ns, name string) ([]*tlsv3.Secret, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	meta, _ := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": "gw"})
	node := &core.Node{Id: "router~10.1.0.9~gw-0." + ns + "~" + ns + ".svc.cluster.local", Metadata: meta}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: secretType, ResourceNames: []string{name}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var out []*tlsv3.Secret
	for _, a := range resp.Resources {
		var s tlsv3.Secret
		if err := a.UnmarshalTo(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, &s)
	}
	return out, nil
}

// A gateway's credentialName Secret (its private key) leaves the process
// only over an authenticated stream of the Secret's namespace: a client on
// the plaintext port that claims to be that gateway gets nothing, as with
// istiod, which serves SDS only to a proxy with a verified identity.
func TestGatewayCredentialsAreServedOnlyToAuthenticatedGateways(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"istio-system", "ns-a"} {
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject(ns), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	certPEM, keyPEM := selfSignedPair(t, "gw.example.com")
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gw-cred", Namespace: "ns-a"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM},
	}
	if _, err := env.Client.CoreV1().Secrets("ns-a").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "ns-a"}}
	if _, err := env.Client.CoreV1().ServiceAccounts("ns-a").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := env.Client.CoreV1().ServiceAccounts("ns-a").CreateToken(ctx, "gw", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"istio-ca"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plainAddr, secureAddr := freePort(t), freePort(t)
	p := startServe(t, "--kubeconfig", env.Kubeconfig, "--grpc-address", plainAddr, "--secure-grpc-address", secureAddr)
	p.waitReady(t)

	tlsCfg := meshRootTLS(t, env, "ns-a")

	secure, err := grpc.NewClient(secureAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithPerRPCCredentials(bearer(tr.Status.Token)))
	if err != nil {
		t.Fatal(err)
	}
	defer secure.Close()
	got, err := sdsSecrets(t, secure, "ns-a", "kubernetes://gw-cred")
	if err != nil {
		t.Fatalf("authenticated gateway of ns-a on the TLS port: %v", err)
	}
	if len(got) != 1 || len(got[0].GetTlsCertificate().GetPrivateKey().GetInlineBytes()) == 0 {
		t.Fatalf("authenticated gateway of ns-a got %d Secrets, want its credential with the key", len(got))
	}

	plain, err := grpc.NewClient(plainAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	got, err = sdsSecrets(t, plain, "ns-a", "kubernetes://gw-cred")
	if err != nil {
		t.Fatalf("plaintext stream: %v; want an answer without the Secret", err)
	}
	if len(got) != 0 {
		t.Fatalf("an unauthenticated client on the plaintext port got %d Secrets (private key included)", len(got))
	}
	// The server's output reaches the test through a pipe: wait for it.
	waitFor(t, 10*time.Second, "the refusal logged with its reason", func() bool {
		return strings.Contains(p.out.String(), "reason=unauthenticated")
	})
	if strings.Contains(p.out.String(), string(keyPEM)) {
		t.Error("the private key is in the log")
	}
}

// selfSignedPair returns a PEM certificate and key for host.
func selfSignedPair(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
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
