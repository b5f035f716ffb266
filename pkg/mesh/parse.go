package mesh

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/golang/protobuf/jsonpb" //nolint:staticcheck // Istio's own MeshConfig decoder: Go durations ("3m"), its merge rules
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"
)

// ErrInvalid is wrapped by every error Parse returns: the text is not a
// MeshConfig istiod would accept, and the MeshConfig in force stays.
var ErrInvalid = errors.New("invalid MeshConfig")

// Parse reads a MeshConfig as istiod's mesh.ApplyMeshConfigDefaults does:
// YAML (or JSON) applied over DefaultMeshConfig with Istio's JSON decoder,
// which replaces each top-level field the text gives (a nested message is
// replaced whole, not merged: localityLbSetting: {failover: [...]} drops
// the default enabled: true, as in Istio), except that defaultConfig is
// applied over Istio's default ProxyConfig, defaultProviders over an empty
// one, extensionProviders are merged by name into Istio's three default
// providers and trustDomainAliases are sorted and deduplicated. Fields
// Istio does not know are dropped, as istiod drops them, and listed in
// Ignored; the result is validated as istiod validates it (validate.go).
// An empty text gives Istio's defaults.
func Parse(text string) (*Config, error) {
	js, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("%w: not YAML: %w", ErrInvalid, err)
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || string(js) == "null" {
		return newConfig(DefaultMeshConfig(), nil, nil), nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("%w: must be an object of MeshConfig fields: %w", ErrInvalid, err)
	}
	unknown := unknownFields(js, (&meshv1alpha1.MeshConfig{}).ProtoReflect().Descriptor(), "")
	mc, err := apply(js, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	warnings, err := validate(mc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ignored := append(unknownIgnored(unknown), ignoredFields(mc, raw)...)
	return newConfig(mc, ignored, warnings), nil
}

// apply is istiod's ApplyMeshConfig over DefaultMeshConfig, written anew.
func apply(js []byte, raw map[string]json.RawMessage) (*meshv1alpha1.MeshConfig, error) {
	mc := DefaultMeshConfig()
	defaultProviders := mc.DefaultProviders
	extensionProviders := mc.ExtensionProviders
	aliases := mc.TrustDomainAliases
	if err := decode(js, mc); err != nil {
		return nil, namedError(raw, err)
	}
	// defaultConfig: over Istio's default ProxyConfig. Its proxyMetadata
	// is merged with the default's, which has none.
	mc.DefaultConfig = DefaultProxyConfig()
	if pc, ok := raw["defaultConfig"]; ok {
		if err := decode(pc, mc.DefaultConfig); err != nil {
			return nil, fmt.Errorf("defaultConfig: %w", err)
		}
	}
	mc.DefaultProviders = defaultProviders
	if dp, ok := raw["defaultProviders"]; ok {
		if err := decode(dp, mc.DefaultProviders); err != nil {
			return nil, fmt.Errorf("defaultProviders: %w", err)
		}
	}
	given := mc.ExtensionProviders
	mc.ExtensionProviders = extensionProviders
	for _, p := range given {
		i := slices.IndexFunc(mc.ExtensionProviders, func(e *meshv1alpha1.MeshConfig_ExtensionProvider) bool { return e.GetName() == p.GetName() })
		if i >= 0 {
			mc.ExtensionProviders[i].Provider = p.Provider
		} else {
			mc.ExtensionProviders = append(mc.ExtensionProviders, p)
		}
	}
	all := append(slices.Clone(mc.TrustDomainAliases), aliases...)
	slices.Sort(all)
	mc.TrustDomainAliases = slices.Compact(all)
	return mc, nil
}

// decode is Istio's protomarshal.ApplyJSON: jsonpb over what m holds,
// strictly first and, if that fails, again without unknown fields (which
// Parse reports as ignored).
func decode(js []byte, m proto.Message) error {
	v1 := m.(interface {
		Reset()
		String() string
		ProtoMessage()
	})
	snapshot := proto.Clone(m)
	err := (&jsonpb.Unmarshaler{}).Unmarshal(bytes.NewReader(js), v1)
	if err == nil {
		return nil
	}
	proto.Reset(m)
	proto.Merge(m, snapshot)
	if err := (&jsonpb.Unmarshaler{AllowUnknownFields: true}).Unmarshal(bytes.NewReader(js), v1); err != nil {
		return cleanError(err)
	}
	return nil
}

// namedError finds the top-level field whose value jsonpb refused (its
// messages do not always say) and names it.
func namedError(raw map[string]json.RawMessage, err error) error {
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		one, _ := json.Marshal(map[string]json.RawMessage{k: raw[k]})
		if decode(one, &meshv1alpha1.MeshConfig{}) != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return err
}

// cleanError drops the Go package names jsonpb puts in its messages.
func cleanError(err error) error {
	msg := err.Error()
	for _, p := range []string{" in istio.mesh.v1alpha1.", " in v1alpha1."} {
		if i := strings.Index(msg, p); i > 0 {
			msg = msg[:i]
		}
	}
	return errors.New(msg)
}

// newConfig wraps a MeshConfig that is never changed after.
func newConfig(mc *meshv1alpha1.MeshConfig, ignored []Field, warnings []string) *Config {
	b, err := protojson.MarshalOptions{UseProtoNames: false}.Marshal(mc)
	if err != nil {
		// Marshalling a message decoded by protobuf's own decoders
		// cannot fail; should it, the hash still tells contents apart.
		b = []byte(mc.String())
	}
	// protojson's output is not stable across builds; canonical JSON is.
	var v any
	if json.Unmarshal(b, &v) == nil {
		if c, err := json.Marshal(v); err == nil {
			b = c
		}
	}
	sum := sha256.Sum256(b)
	return &Config{mc: mc, hash: hex.EncodeToString(sum[:8]), ignored: ignored, warnings: warnings}
}
