package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/internal/testenv"
	pb "github.com/meshplane/discovery/proto/istio/v1/auth"
)

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// bearer sends a token with every call, as pilot-agent does.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

// adsFirstResponse opens an ADS stream as node nodeNS/sa, asks for clusters
// and returns the first response or the stream's error.
func adsFirstResponse(t *testing.T, addr string, tlsCfg *tls.Config, token, nodeNS, sa string) (*discovery.DiscoveryResponse, error) {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	meta, _ := structpb.NewStruct(map[string]any{"NAMESPACE": nodeNS, "SERVICE_ACCOUNT": sa})
	node := &core.Node{Id: "sidecar~10.1.0.7~web-0." + nodeNS + "~" + nodeNS + ".svc.cluster.local", Metadata: meta}
	// A stream the server ended answers Send with io.EOF; its status comes
	// from Recv.
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: clusterType}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return stream.Recv()
}

// xDS on :15012 knows who is asking: a token or a client certificate of
// namespace A gets config for a node in A; a node in B, or no credential,
// is refused.
func TestSecureXDSAuthenticatesEveryStream(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"istio-system", "team-a", "team-b"} {
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, nsObject(ns), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
	if _, err := env.Client.CoreV1().ServiceAccounts("team-a").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := env.Client.CoreV1().ServiceAccounts("team-a").CreateToken(ctx, "web", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"istio-ca"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	secure := freePort(t)
	p := startServe(t, "--kubeconfig", env.Kubeconfig, "--secure-grpc-address", secure)
	p.waitReady(t)

	tlsCfg := meshRootTLS(t, env, "team-a")

	if _, err := adsFirstResponse(t, secure, tlsCfg, token, "team-a", "web"); err != nil {
		t.Fatalf("token of team-a, node in team-a: %v", err)
	}
	_, err = adsFirstResponse(t, secure, tlsCfg, token, "team-b", "web")
	if status.Code(err) != codes.PermissionDenied || strings.Contains(err.Error(), "team") {
		t.Errorf("token of team-a, node in team-b: %v; want an opaque PermissionDenied", err)
	}
	_, err = adsFirstResponse(t, secure, tlsCfg, token, "team-a", "other")
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("token of team-a/web, node of service account other: %v; want PermissionDenied", err)
	}
	if _, err := adsFirstResponse(t, secure, tlsCfg, "", "team-a", "web"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no credential: %v; want Unauthenticated", err)
	}
	if !strings.Contains(p.out.String(), "the node is not the caller's") || strings.Contains(p.out.String(), token) {
		t.Error("the log does not give the reason, or shows the token")
	}

	// A client certificate from our CA works without a token.
	cert := workloadCert(t, secure, tlsCfg, token, "spiffe://cluster.local/ns/team-a/sa/web")
	withCert := tlsCfg.Clone()
	withCert.Certificates = []tls.Certificate{cert}
	if _, err := adsFirstResponse(t, secure, withCert, "", "team-a", "web"); err != nil {
		t.Fatalf("client certificate of team-a: %v", err)
	}
	if _, err := adsFirstResponse(t, secure, withCert, "", "team-b", ""); status.Code(err) != codes.PermissionDenied {
		t.Errorf("client certificate of team-a, node in team-b: %v; want PermissionDenied", err)
	}
}

// meshRootTLS waits for the root certificate published in ns and returns
// a client TLS configuration that trusts it for istiod's name.
func meshRootTLS(t *testing.T, env *testenv.Env, ns string) *tls.Config {
	t.Helper()
	var rootPEM string
	waitFor(t, 20*time.Second, "istio-ca-root-cert in "+ns, func() bool {
		cm, err := env.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), "istio-ca-root-cert", metav1.GetOptions{})
		if err == nil {
			rootPEM = cm.Data["root-cert.pem"]
		}
		return rootPEM != ""
	})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(rootPEM))
	return &tls.Config{RootCAs: roots, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12}
}

// workloadCert asks the CA for a certificate for spiffeID with token.
func workloadCert(t *testing.T, addr string, tlsCfg *tls.Config, token, spiffeID string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	uri, _ := url.Parse(spiffeID)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{uri}}, key)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)), grpc.WithPerRPCCredentials(bearer(token)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pb.NewIstioCertificateServiceClient(conn).CreateCertificate(context.Background(), &pb.IstioCertificateRequest{
		Csr: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), ValidityDuration: 3600,
	})
	if err != nil {
		t.Fatal(err)
	}
	var chain [][]byte
	for _, c := range resp.CertChain {
		b, _ := pem.Decode([]byte(c))
		chain = append(chain, b.Bytes)
	}
	return tls.Certificate{Certificate: chain, PrivateKey: key}
}
