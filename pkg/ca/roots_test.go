package ca

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestParseBundle(t *testing.T) {
	_, plugged := pluggedInCA(t, "op")
	self, err := NewSelfSignedBundle("cluster.local", KeyTypeRSA, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	selfData, err := self.Data()
	if err != nil {
		t.Fatal(err)
	}
	_, otherData := pluggedInCA(t, "other")
	tlsStyle := map[string][]byte{
		KeyTLSCert: append(append([]byte{}, plugged[KeyCACert]...), plugged[KeyRootCert]...),
		KeyTLSKey:  plugged[KeyCAKey],
		KeyTLSCA:   plugged[KeyRootCert],
	}
	with := func(base map[string][]byte, k string, v []byte) map[string][]byte {
		out := map[string][]byte{}
		for kk, vv := range base {
			out[kk] = vv
		}
		out[k] = v
		return out
	}
	// A leaf with its own key and root: well formed, but not a CA.
	leafKey := ecKey(t)
	leafChain, _, err := NewAuthority(self).SignWorkload(leafKey.Public(), Identity{"cluster.local", "a", "b"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leafKeyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	notCA := map[string][]byte{
		KeyCACert: []byte(leafChain[0]), KeyRootCert: selfData[KeyRootCert],
		KeyCAKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: leafKeyDER}),
	}

	tests := map[string]struct {
		data      map[string][]byte
		chainLen  int
		wantError string
	}{
		"reads Istio's cacerts names":               {data: plugged, chainLen: 2},
		"reads kubernetes.io/tls names":             {data: tlsStyle, chainLen: 2},
		"reads a self-signed root as written":       {data: selfData, chainLen: 1},
		"reads a root without root-cert.pem":        {data: map[string][]byte{KeyCACert: selfData[KeyCACert], KeyCAKey: selfData[KeyCAKey]}, chainLen: 1},
		"refuses a key of another certificate":      {data: with(plugged, KeyCAKey, otherData[KeyCAKey]), wantError: "does not belong"},
		"refuses an intermediate of another root":   {data: with(plugged, KeyRootCert, otherData[KeyRootCert]), wantError: "is not signed by"},
		"refuses a certificate that is not a CA":    {data: notCA, wantError: "may not sign certificates"},
		"refuses a missing certificate":             {data: map[string][]byte{KeyCAKey: plugged[KeyCAKey]}, wantError: "no certificate found"},
		"refuses a garbage key":                     {data: with(plugged, KeyCAKey, []byte("garbage")), wantError: "no PEM key"},
		"refuses a root that is not self-signed":    {data: with(plugged, KeyRootCert, plugged[KeyCACert]), wantError: "not self-signed"},
		"refuses a certificate PEM with a bad body": {data: with(plugged, KeyCACert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}})), wantError: "CA certificate"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := ParseBundle(tc.data)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Chain) != tc.chainLen {
				t.Fatalf("chain of %d, want %d", len(b.Chain), tc.chainLen)
			}
		})
	}
}

func TestSelfSignedRootShape(t *testing.T) {
	for _, kt := range []string{KeyTypeECDSA, KeyTypeRSA} {
		b, err := NewSelfSignedBundle("example.org", kt, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !b.SelfSigned() || !b.Root.IsCA || b.Root.KeyUsage&x509.KeyUsageCertSign == 0 {
			t.Fatalf("%s root is not a CA", kt)
		}
		if life := b.Root.NotAfter.Sub(b.Root.NotBefore); life < rootTTL {
			t.Fatalf("%s root lives %s, want 10 years", kt, life)
		}
		if got := b.Root.PublicKeyAlgorithm.String(); !strings.HasPrefix(got, kt) {
			t.Fatalf("root key %s, want %s", got, kt)
		}
	}
}

func TestKubeRootsKeepTheRootWhenTheSecretIsDeleted(t *testing.T) {
	client := fake.NewClientset()
	k := &kubeRoots{
		client: client, namespace: "istio-system", trustDomain: "cluster.local", keyType: KeyTypeECDSA,
		log: newLogger(&logBuffer{}), now: time.Now,
	}
	first, err := k.load(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Secrets("istio-system").Delete(t.Context(), SecretSelfSigned, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again, err := k.load(t.Context(), first)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Root.Equal(first.Root) {
		t.Fatal("deleting istio-ca-secret changed the root")
	}
	if _, err := client.CoreV1().Secrets("istio-system").Get(t.Context(), SecretSelfSigned, metav1.GetOptions{}); err != nil {
		t.Fatalf("istio-ca-secret was not written back: %v", err)
	}
}

func TestBadPluggedInSecretKeepsTheCurrentCA(t *testing.T) {
	client := fakeClient(nil)
	logs := &logBuffer{}
	c, err := New(t.Context(), testOptions(), client, newLogger(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	before := c.authority.Bundle()
	_, err = client.CoreV1().Secrets("istio-system").Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretPluggedIn, Namespace: "istio-system"},
		Data:       map[string][]byte{KeyCACert: []byte("garbage")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.reload(t.Context())
	if c.authority.Bundle() != before {
		t.Fatal("a broken cacerts replaced the CA in force")
	}
	if !strings.Contains(logs.String(), "keeping the current one") {
		t.Fatalf("no log of the refused cacerts:\n%s", logs)
	}
}

func TestFileModePicksUpAChangedDirectory(t *testing.T) {
	dir := t.TempDir()
	o := testOptions()
	o.Dir, o.RootPollInterval = dir, 20*time.Millisecond
	c, err := New(t.Context(), o, nil, newLogger(&logBuffer{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, c.Start)
	root, data := pluggedInCA(t, "operator")
	for name, v := range data {
		if err := os.WriteFile(filepath.Join(dir, name), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the CA from the rewritten directory", func() bool {
		return c.authority.Bundle().Root.Equal(root)
	})
	chain, _, err := c.authority.SignWorkload(ecKey(t).Public(), Identity{"cluster.local", "app", "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, parseChain(t, chain), root, idA, time.Hour)
}
