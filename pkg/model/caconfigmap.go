package model

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// CA ConfigMaps (KindCAConfigMap) are held for BackendTLSPolicy only:
// their CA keys (ca.crt, cacert), nothing else of them. Generation never
// reads them; a change reaches proxies through the DestinationRule the
// translation derives from a policy naming the ConfigMap (its CA is
// inlined there), so a change of a ConfigMap no policy names translates
// nothing again.

// CAConfigMapData keeps the CA keys of a ConfigMap's data.
func CAConfigMapData(data map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{gatewayapi.KeyCA, gatewayapi.KeyIstioCA} {
		if v, ok := data[k]; ok {
			out[k] = v
		}
	}
	return out
}

// CAConfigMap returns the CA keys of ConfigMap ns/name, and false when no
// such ConfigMap is known.
func (w *World) CAConfigMap(ns, name string) (map[string]string, bool) {
	d, ok := w.caConfigMaps[NamespacedName{ns, name}]
	return d, ok
}

func (b *builder) caConfigMap(ev Event) error {
	nn := NamespacedName{ev.Key.Namespace, ev.Key.Name}
	old, had := b.w.caConfigMaps[nn]
	if ev.Op == OpDelete {
		if !had {
			return nil
		}
		cow(b, "caConfigMaps", &b.w.caConfigMaps)
		delete(b.w.caConfigMaps, nn)
		b.changed(ev.Key, OpDelete)
		return nil
	}
	cm, ok := ev.Object.(*corev1.ConfigMap)
	if !ok {
		return fmt.Errorf("%w: %T", ErrWrongType, ev.Object)
	}
	data := CAConfigMapData(cm.Data)
	if had && maps.Equal(old, data) {
		return nil
	}
	cow(b, "caConfigMaps", &b.w.caConfigMaps)
	if b.w.caConfigMaps == nil {
		b.w.caConfigMaps = map[NamespacedName]map[string]string{}
	}
	b.w.caConfigMaps[nn] = data
	b.changed(ev.Key, OpUpsert)
	return nil
}

// caConfigMapUsed reports whether a BackendTLSPolicy of the ConfigMap's
// namespace names it as its CA.
func (b *builder) caConfigMapUsed(k Key) bool {
	for nn, c := range b.w.configs[KindBackendTLSPolicy] {
		if nn.Namespace != k.Namespace {
			continue
		}
		p, ok := c.Object.(*gatewayv1.BackendTLSPolicy)
		if !ok {
			continue
		}
		for _, r := range p.Spec.Validation.CACertificateRefs {
			if string(r.Name) == k.Name {
				return true
			}
		}
	}
	return false
}
