package testenv

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func TestAPIServerIssuesAndReviewsServiceAccountTokens(t *testing.T) {
	env := Start(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "app"}}
	if _, err := env.Client.CoreV1().ServiceAccounts("app").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := env.Client.CoreV1().ServiceAccounts("app").CreateToken(ctx, "web", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"istio-ca"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	review, err := env.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token, Audiences: []string{"istio-ca"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:app:web" {
		t.Fatalf("review = %+v", review.Status)
	}
	// A pod is accepted without a controller-manager.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "app"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	if _, err := env.Client.CoreV1().Pods("app").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestAPIServerRestartKeepsData(t *testing.T) {
	env := Start(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: "default"}}
	if _, err := env.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.StopAPIServer(t)
	if _, err := env.Client.CoreV1().ConfigMaps("default").Get(ctx, "keep", metav1.GetOptions{}); err == nil {
		t.Fatal("API server still answers after StopAPIServer")
	}
	env.StartAPIServer(t)
	if _, err := env.Client.CoreV1().ConfigMaps("default").Get(ctx, "keep", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func TestEtcdRestartKeepsData(t *testing.T) {
	env := Start(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: "default"}}
	if _, err := env.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.StopEtcd(t)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := env.Client.CoreV1().ConfigMaps("default").Create(short, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lost", Namespace: "default"}}, metav1.CreateOptions{}); err == nil {
		t.Fatal("the API server stored an object with etcd stopped")
	}
	env.StartEtcd(t)
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err = env.Client.CoreV1().ConfigMaps("default").Get(ctx, "keep", metav1.GetOptions{}); err == nil {
			return
		}
	}
	t.Fatalf("after the etcd restart: %v", err)
}

// A watch resuming from before a compaction and an API server restart
// expires: its client has to list again, as informers do.
func TestCompactionExpiresWatchesFromBefore(t *testing.T) {
	env := Start(t)
	ctx := context.Background()
	cm, err := env.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "default"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env.StopAPIServer(t)
	if rev := env.CompactEtcd(t); strconv.FormatInt(rev, 10) == cm.ResourceVersion {
		t.Fatalf("compacted at the ConfigMap's own revision %d", rev)
	}
	env.StartAPIServer(t)
	w, err := env.Client.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: cm.ResourceVersion})
	if err == nil {
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			st, ok := ev.Object.(*metav1.Status)
			if ev.Type != watch.Error || !ok || st.Code != http.StatusGone {
				t.Fatalf("watch from %s after compaction: %s %+v, want an Error event with 410", cm.ResourceVersion, ev.Type, ev.Object)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no event on a watch from before the compaction")
		}
	} else if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from %s after compaction: %v, want 410 Gone", cm.ResourceVersion, err)
	}
}
