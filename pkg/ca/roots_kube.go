package ca

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Names of the CA Secrets.
const (
	// SecretPluggedIn holds an operator's intermediate CA.
	SecretPluggedIn = "cacerts"
	// SecretSelfSigned holds the self-signed root shared by all replicas.
	SecretSelfSigned = "istio-ca-secret"
	// secretTypeCA is the type Istio gives istio-ca-secret.
	secretTypeCA corev1.SecretType = "istio.io/ca-root"
)

// rootSource yields the CA bundle and reports changes.
type rootSource interface {
	// load returns the bundle in force; current is the one in use (nil at
	// start), kept when the source lost it so that the root never changes
	// by accident.
	load(ctx context.Context, current *Bundle) (*Bundle, error)
	// watch calls changed whenever the source may have changed, until ctx ends.
	watch(ctx context.Context, changed func()) error
}

// kubeRoots reads the CA from the Secrets cacerts, else istio-ca-secret,
// creating the latter once: a replica that loses the create race reads the
// winner's root, so every replica signs with the same root.
type kubeRoots struct {
	client      kubernetes.Interface
	namespace   string
	trustDomain string
	keyType     string
	log         *slog.Logger
	now         func() time.Time
}

var _ rootSource = (*kubeRoots)(nil)

func (k *kubeRoots) load(ctx context.Context, current *Bundle) (*Bundle, error) {
	secrets := k.client.CoreV1().Secrets(k.namespace)
	s, err := secrets.Get(ctx, SecretPluggedIn, metav1.GetOptions{})
	switch {
	case err == nil:
		b, err := ParseBundle(s.Data)
		if err != nil {
			return nil, fmt.Errorf("secret %s/%s: %w", k.namespace, SecretPluggedIn, err)
		}
		return b, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get secret %s/%s: %w", k.namespace, SecretPluggedIn, err)
	}
	return k.loadSelfSigned(ctx, current)
}

func (k *kubeRoots) loadSelfSigned(ctx context.Context, current *Bundle) (*Bundle, error) {
	secrets := k.client.CoreV1().Secrets(k.namespace)
	s, err := secrets.Get(ctx, SecretSelfSigned, metav1.GetOptions{})
	if err == nil {
		return parseSecret(s)
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get secret %s/%s: %w", k.namespace, SecretSelfSigned, err)
	}
	b := current
	if b == nil || !b.SelfSigned() {
		if b, err = NewSelfSignedBundle(k.trustDomain, k.keyType, k.now()); err != nil {
			return nil, err
		}
	}
	data, err := b.Data()
	if err != nil {
		return nil, err
	}
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretSelfSigned, Namespace: k.namespace},
		Type:       secretTypeCA,
		Data:       data,
	}, metav1.CreateOptions{})
	switch {
	case err == nil:
		k.log.Info("created self-signed root", "secret", k.namespace+"/"+SecretSelfSigned,
			"notAfter", b.Root.NotAfter.UTC().Format(time.RFC3339))
		return b, nil
	case apierrors.IsAlreadyExists(err):
		// Another replica won the race: use its root.
		s, err := secrets.Get(ctx, SecretSelfSigned, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get secret %s/%s after losing the create race: %w", k.namespace, SecretSelfSigned, err)
		}
		return parseSecret(s)
	default:
		return nil, fmt.Errorf("create secret %s/%s: %w", k.namespace, SecretSelfSigned, err)
	}
}

func parseSecret(s *corev1.Secret) (*Bundle, error) {
	b, err := ParseBundle(s.Data)
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return b, nil
}

// watch runs one informer per CA Secret (selected by name) and calls changed
// on every add, update or delete.
func (k *kubeRoots) watch(ctx context.Context, changed func()) error {
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}
	var factories []informers.SharedInformerFactory
	for _, name := range []string{SecretPluggedIn, SecretSelfSigned} {
		selector := fields.OneTermEqualSelector("metadata.name", name).String()
		f := informers.NewSharedInformerFactoryWithOptions(k.client, 0, informers.WithNamespace(k.namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
		if _, err := f.Core().V1().Secrets().Informer().AddEventHandler(handler); err != nil {
			return fmt.Errorf("watch secret %s: %w", name, err)
		}
		f.Start(ctx.Done())
		factories = append(factories, f)
	}
	<-ctx.Done()
	for _, f := range factories {
		f.Shutdown()
	}
	return nil
}
