package model

import (
	"fmt"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// KindJWKS is derived, never read from a source: the JWKS resolver
// (pkg/jwks) fetches the key set of every RequestAuthentication rule that
// names a jwksUri (or only an issuer, resolved by OpenID discovery) and
// hands it to the Store as an Event of this kind, Object a *JWKS, Key
// JWKSKey(issuer, uri). Generation inlines the keys it finds here
// (gen/authn_jwt.go), so that it stays a function of the World, and a
// changed key set is a Change the push planner sees.
const KindJWKS Kind = "JWKS"

// JWKS is the key set fetched for one (issuer, jwksUri) pair of a
// RequestAuthentication rule. It is immutable once handed to the Store.
type JWKS struct {
	Issuer string
	// URI is the rule's jwksUri; "" when the rule names only an issuer.
	URI string
	// Keys is the fetched JSON Web Key Set, as served; "" when none could
	// be fetched (Failed), in which case generation inlines a key set
	// nobody can sign for, so that every token is refused (istiod's
	// fail-closed PublicOnlyJwks).
	Keys string
	// Failed says no usable key set is known: the first fetch failed, or
	// none succeeded for longer than the eviction period.
	Failed bool
	// Error says why, for debugging; never key material. It does not take
	// part in change detection.
	Error string
}

var _ runtime.Object = (*JWKS)(nil)

// GetObjectKind is empty: a JWKS is never serialized.
func (*JWKS) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject shares the immutable strings.
func (j *JWKS) DeepCopyObject() runtime.Object { c := *j; return &c }

// JWKSKey names the key set of (issuer, uri).
func JWKSKey(issuer, uri string) Key {
	return Key{Kind: KindJWKS, Name: issuer + " " + uri}
}

// JWKSKeyParts returns the issuer and uri a JWKSKey names (a URI has no
// space; an issuer may).
func JWKSKeyParts(k Key) (issuer, uri string) {
	i := strings.LastIndexByte(k.Name, ' ')
	if i < 0 {
		return k.Name, ""
	}
	return k.Name[:i], k.Name[i+1:]
}

// JWKS returns the key set fetched for (issuer, uri), or nil when none
// was handed to the Store yet.
func (w *World) JWKS(issuer, uri string) *JWKS {
	return w.jwks[JWKSKey(issuer, uri).Name]
}

// JWKSCount is the number of key sets the World holds.
func (w *World) JWKSCount() int { return len(w.jwks) }

// jwksSet applies a KindJWKS event. A key set equal to the one held
// (same keys, same failure state) changes nothing: a refresh that finds
// the same keys, or fails again, publishes no World.
func (b *builder) jwksSet(ev Event) error {
	old := b.w.jwks[ev.Key.Name]
	if ev.Op == OpDelete {
		if old == nil {
			return nil
		}
		b.cloneJWKS()
		delete(b.w.jwks, ev.Key.Name)
		b.changed(ev.Key, OpDelete)
		return nil
	}
	j, ok := ev.Object.(*JWKS)
	if !ok {
		return fmt.Errorf("%w: %T", ErrWrongType, ev.Object)
	}
	if JWKSKey(j.Issuer, j.URI) != ev.Key {
		return fmt.Errorf("the key set of %q %q is named %s", j.Issuer, j.URI, JWKSKey(j.Issuer, j.URI))
	}
	if old != nil && old.Keys == j.Keys && old.Failed == j.Failed {
		return nil
	}
	b.cloneJWKS()
	b.w.jwks[ev.Key.Name] = j
	b.changed(ev.Key, OpUpsert)
	return nil
}

func (b *builder) cloneJWKS() {
	if !b.cloned["jwks"] {
		m := maps.Clone(b.w.jwks)
		if m == nil {
			m = map[string]*JWKS{}
		}
		b.w.jwks = m
		b.cloned["jwks"] = true
	}
}
