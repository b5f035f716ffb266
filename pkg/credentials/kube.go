package credentials

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Kube reads TLS Secrets from the API server with its own informer.
type Kube struct {
	log      *slog.Logger
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	secrets  prometheus.Gauge

	mu       sync.Mutex
	handlers []func(namespace, name string)
	valid    map[string]validity // namespace/name -> verdict (Certificate)
	presence []func(namespace, name string)
}

// OnPresence registers fn for every Secret created or deleted, TLS or
// not (a certificateRef's status says whether its Secret exists).
func (k *Kube) OnPresence(fn func(namespace, name string)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.presence = append(k.presence, fn)
}

func (k *Kube) presenceChanged(ns, name string, deleted bool) {
	k.mu.Lock()
	if deleted {
		delete(k.valid, ns+"/"+name)
	}
	hs := append([]func(string, string){}, k.presence...)
	k.mu.Unlock()
	for _, h := range hs {
		h(ns, name)
	}
}

var _ Reader = (*Kube)(nil)

// NewKube returns a Reader of the cluster's TLS Secrets; it reads once
// Start runs. It registers discovery_credentials_tls_secrets.
func NewKube(client kubernetes.Interface, log *slog.Logger, reg prometheus.Registerer) (*Kube, error) {
	if client == nil {
		return nil, errors.New("credentials: no Kubernetes client")
	}
	k := &Kube{log: log, secrets: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "discovery_credentials_tls_secrets",
		Help: "Secrets holding TLS material (a certificate and key, or a CA) that gateways may name in credentialName.",
	})}
	if err := reg.Register(k.secrets); err != nil {
		return nil, err
	}
	k.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(keepTLS))
	k.informer = k.factory.Core().V1().Secrets().Informer()
	_, err := k.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { k.changed(nil, obj) },
		UpdateFunc: func(old, obj any) {
			if !sameTLS(old, obj) {
				k.changed(old, obj)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			k.changed(obj, nil)
		},
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// Start reads Secrets until ctx ends.
func (k *Kube) Start(ctx context.Context) error {
	k.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), k.informer.HasSynced) && ctx.Err() == nil {
		return errors.New("credentials: Secret informer did not sync")
	}
	<-ctx.Done()
	k.factory.Shutdown()
	return nil
}

// HasSynced reports whether the first list of Secrets has been read.
func (k *Kube) HasSynced() bool { return k.informer.HasSynced() }

// OnChange registers fn for every change of a Secret's TLS material.
func (k *Kube) OnChange(fn func(namespace, name string)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.handlers = append(k.handlers, fn)
}

// Get returns the TLS material of namespace/name.
func (k *Kube) Get(namespace, name string) (TLS, bool) {
	obj, ok, err := k.informer.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return TLS{}, false
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return TLS{}, false
	}
	return material(s)
}

func (k *Kube) changed(old, obj any) {
	s, _ := obj.(*corev1.Secret)
	if s == nil {
		s, _ = old.(*corev1.Secret)
	}
	if s == nil {
		return
	}
	if old == nil || obj == nil {
		k.presenceChanged(s.Namespace, s.Name, obj == nil)
	}
	_, hadTLS := materialOf(old)
	_, hasTLS := materialOf(obj)
	if !hadTLS && !hasTLS {
		return // never TLS material: no gateway can be using it
	}
	switch {
	case hasTLS && !hadTLS:
		k.secrets.Inc()
	case hadTLS && !hasTLS:
		k.secrets.Dec()
	}
	k.log.Debug("TLS secret changed", "secret", s.Namespace+"/"+s.Name)
	k.mu.Lock()

	hs := append([]func(string, string){}, k.handlers...)
	k.mu.Unlock()
	for _, h := range hs {
		h(s.Namespace, s.Name)
	}
}

func materialOf(obj any) (TLS, bool) {
	s, ok := obj.(*corev1.Secret)
	if !ok || s == nil {
		return TLS{}, false
	}
	return material(s)
}

// material reads a cached (transformed) Secret.
func material(s *corev1.Secret) (TLS, bool) {
	t := TLS{Cert: s.Data[KeyCert], Key: s.Data[KeyKey], CA: s.Data[KeyCA]}
	if len(t.CA) == 0 {
		t.CA = s.Data[KeyIstioCA]
	}
	if !t.HasCertificate() {
		t.Cert, t.Key = nil, nil
	}
	return t, t.HasCertificate() || len(t.CA) > 0
}

func sameTLS(a, b any) bool {
	ta, oka := materialOf(a)
	tb, okb := materialOf(b)
	return oka == okb && bytes.Equal(ta.Cert, tb.Cert) && bytes.Equal(ta.Key, tb.Key) && bytes.Equal(ta.CA, tb.CA)
}

// keepTLS is the informer's transform: a Secret of type kubernetes.io/tls
// or Opaque keeps its name, namespace, type and TLS keys; any other Secret
// keeps its name alone. Labels, annotations and every other key go.
func keepTLS(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	out := &corev1.Secret{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
		},
		Type: s.Type,
	}
	if s.Type != corev1.SecretTypeTLS && s.Type != corev1.SecretTypeOpaque && s.Type != "" {
		return out, nil
	}
	for _, key := range []string{KeyCert, KeyKey, KeyCA, KeyIstioCA} {
		if v, ok := s.Data[key]; ok {
			if out.Data == nil {
				out.Data = map[string][]byte{}
			}
			out.Data[key] = v
		}
	}
	return out, nil
}
