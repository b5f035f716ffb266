package credentials

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func secret(ns, name string, typ corev1.SecretType, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, Labels: map[string]string{"app": "x"},
			Annotations: map[string]string{"note": "dropped"},
		},
		Type: typ, Data: map[string][]byte{},
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestKeepTLS(t *testing.T) {
	cases := map[string]struct {
		in       *corev1.Secret
		wantKeys []string
		wantTLS  bool
	}{
		"a kubernetes.io/tls Secret keeps its certificate, key and CA and nothing else": {
			in:       secret("a", "s", corev1.SecretTypeTLS, map[string]string{KeyCert: "c", KeyKey: "k", KeyCA: "ca", "other": "x"}),
			wantKeys: []string{KeyCert, KeyKey, KeyCA}, wantTLS: true,
		},
		"an Opaque Secret with tls.crt and tls.key is read too": {
			in:       secret("a", "s", corev1.SecretTypeOpaque, map[string]string{KeyCert: "c", KeyKey: "k", "password": "p"}),
			wantKeys: []string{KeyCert, KeyKey}, wantTLS: true,
		},
		"an Opaque Secret holding only Istio's cacert key is a CA": {
			in:       secret("a", "s-cacert", corev1.SecretTypeOpaque, map[string]string{KeyIstioCA: "ca"}),
			wantKeys: []string{KeyIstioCA}, wantTLS: true,
		},
		"a service account token keeps no data at all": {
			in:      secret("a", "tok", corev1.SecretTypeServiceAccountToken, map[string]string{"token": "t", KeyCA: "ca"}),
			wantTLS: false,
		},
		"an Opaque Secret without TLS keys keeps no data": {
			in:      secret("a", "db", corev1.SecretTypeOpaque, map[string]string{"password": "p"}),
			wantTLS: false,
		},
		"a certificate without its key is not a certificate": {
			in:       secret("a", "half", corev1.SecretTypeTLS, map[string]string{KeyCert: "c"}),
			wantKeys: []string{KeyCert}, wantTLS: false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obj, err := keepTLS(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			out := obj.(*corev1.Secret)
			if len(out.Labels) != 0 || len(out.Annotations) != 0 {
				t.Errorf("metadata kept: labels %v annotations %v", out.Labels, out.Annotations)
			}
			if len(out.Data) != len(tc.wantKeys) {
				t.Errorf("kept keys %v, want %v", keys(out.Data), tc.wantKeys)
			}
			for _, k := range tc.wantKeys {
				if _, ok := out.Data[k]; !ok {
					t.Errorf("key %q dropped", k)
				}
			}
			if _, ok := material(out); ok != tc.wantTLS {
				t.Errorf("TLS material: %v, want %v", ok, tc.wantTLS)
			}
		})
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// recorder collects change callbacks.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(ns, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ns+"/"+name)
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, g := range r.got {
		if g == key {
			n++
		}
	}
	return n
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestKubeReadsAndNotifies(t *testing.T) {
	client := fake.NewClientset(
		secret("gw", "cert", corev1.SecretTypeTLS, map[string]string{KeyCert: "c1", KeyKey: "k1"}),
		secret("gw", "db", corev1.SecretTypeOpaque, map[string]string{"password": "p"}),
	)
	k, err := NewKube(client, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	k.OnChange(rec.add)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = k.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "the informer to sync", k.HasSynced)

	got, ok := k.Get("gw", "cert")
	if !ok || string(got.Cert) != "c1" || string(got.Key) != "k1" {
		t.Fatalf("Get(gw/cert) = %q %q %v, want c1 k1", got.Cert, got.Key, ok)
	}
	if _, ok := k.Get("gw", "db"); ok {
		t.Error("a Secret without TLS keys is served")
	}
	if _, ok := k.Get("other", "cert"); ok {
		t.Error("a Secret is found in a namespace it is not in")
	}

	t.Run("a new certificate is read and announced", func(t *testing.T) {
		s := secret("gw", "cert", corev1.SecretTypeTLS, map[string]string{KeyCert: "c2", KeyKey: "k2"})
		if _, err := client.CoreV1().Secrets("gw").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the new certificate", func() bool {
			got, _ := k.Get("gw", "cert")
			return string(got.Cert) == "c2" && rec.count("gw/cert") >= 2
		})
	})
	t.Run("a change to a Secret without TLS keys is not announced", func(t *testing.T) {
		before := rec.count("gw/db")
		s := secret("gw", "db", corev1.SecretTypeOpaque, map[string]string{"password": "changed"})
		if _, err := client.CoreV1().Secrets("gw").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// A later TLS change is announced; by then the db update was handled.
		s2 := secret("gw", "ca", corev1.SecretTypeOpaque, map[string]string{KeyCA: "ca"})
		if _, err := client.CoreV1().Secrets("gw").Create(context.Background(), s2, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the CA secret", func() bool { return rec.count("gw/ca") == 1 })
		if rec.count("gw/db") != before {
			t.Errorf("the password Secret was announced")
		}
	})
	t.Run("a deleted Secret is gone and announced", func(t *testing.T) {
		before := rec.count("gw/cert")
		if err := client.CoreV1().Secrets("gw").Delete(context.Background(), "cert", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the deletion", func() bool {
			_, ok := k.Get("gw", "cert")
			return !ok && rec.count("gw/cert") == before+1
		})
	})
}

func TestCanRead(t *testing.T) {
	cases := map[string]struct {
		allowed map[string]bool
		want    bool
	}{
		"list and watch allowed is enough": {map[string]bool{"list": true, "watch": true}, true},
		"list without watch is not":        {map[string]bool{"list": true}, false},
		"nothing allowed leaves it off":    {map[string]bool{}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
				ra := r.Spec.ResourceAttributes
				if ra.Resource != "secrets" || ra.Namespace != "" {
					t.Errorf("asked about %+v, want secrets in every namespace", ra)
				}
				r.Status.Allowed = tc.allowed[ra.Verb]
				return true, r, nil
			})
			got, err := CanRead(context.Background(), client)
			if err != nil || got != tc.want {
				t.Errorf("CanRead = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
