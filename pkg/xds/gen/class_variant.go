package gen

import (
	"errors"
	"maps"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshplane/discovery/pkg/model"
)

// Classes that differ in their service tags alone.
//
// With tracing on (the default MeshConfig) every connection manager's
// tracing names the proxy's canonical service and revision, mesh and
// cluster in literal tags (serviceTags, as istiod's buildServiceTags),
// and Istio's injector gives every pod the canonical labels. Keyed on
// them, every workload would be a class of its own: at M1 with the labels
// an injected pod's pilot-agent sends, 1,000 classes, 192 CPU s to
// connect and 12 GB of RSS (BENCHMARKS.md), where the configurations
// differ in nothing but those tags' values. istiod builds listeners per
// proxy and keeps none; here a class keeps its configuration for the
// next generation to reuse.
//
// So the tags are the last part of a sidecar's class key (|tags=), and a
// class with them is a variant of the class without them, its base: the
// base is generated once, for the first proxy that asks (its
// representative), and a variant is the base's configuration with the
// literal values of the four tags in its listeners rewritten from the
// representative's to its own, on the wire (retag), and its scope's
// telemetry built for it (its own inbound listeners are built from that).
// Everything else, clusters, endpoints, routes, what generation read, is
// the base's. The rewrite is byte for byte what generating the variant's
// class gives (TestVariantsAreTheirClasses); where a connection manager's
// tags are not exactly Istio's service tags with the representative's
// values (a custom tag of the same name), the rewrite refuses and the
// variant is generated as a class of its own.

// variantSep starts the variant's part of a class key.
const variantSep = "|tags="

// variantsApply reports whether p's service tags make a variant rather
// than a class: sidecars served by Envoy. Gateways are classes by their
// labels already, proxyless gRPC clients have no connection managers.
func variantsApply(p *model.Proxy) bool {
	return p.Type == model.ProxySidecar && !p.IsGRPC()
}

// VariantOf splits a class key into its base and the variant's tags (""
// when the key is no variant's).
func VariantOf(key string) (base, tags string) {
	i := strings.LastIndex(key, variantSep)
	if i < 0 {
		return key, ""
	}
	return key[:i], key[i+len(variantSep):]
}

// variant is what a variant's configuration holds of its making.
type variant struct {
	// base is the configuration it was made from.
	base *ClassConfig
	// retagged maps each of base's listeners to the variant's.
	retagged map[*Resource]*Resource
}

// tagValues is the value of each of the service tags a variant rewrites.
func tagValues(p *model.Proxy) map[string]string {
	out := map[string]string{}
	for _, t := range serviceTags(p) {
		if t.Tag != "istio.namespace" {
			out[t.Tag] = t.GetLiteral().GetValue()
		}
	}
	return out
}

// errNotVariant is a listener whose tracing tags retag cannot rewrite.
var errNotVariant = errors.New("the tracing tags are not the representative's service tags")

// Variant returns the configuration of the class key for p, a variant of
// base's class (VariantOf): base's, with the service tags of its
// listeners naming p's values. prev is the variant's previous
// configuration, or nil: the listeners it rewrote from listeners base
// still has are taken as they are. It returns false when base's listeners
// do not carry the tags as generation puts them (errNotVariant): then the
// class key's configuration must be generated for p (Class).
func (g *Generator) Variant(base *ClassConfig, key string, p *model.Proxy, prev *ClassConfig) (*ClassConfig, bool) {
	if base.scope == nil || base.scope.Proxy == nil {
		return nil, false
	}
	rt := retag{from: tagValues(base.scope.Proxy), to: tagValues(p)}
	v := &variant{base: base, retagged: map[*Resource]*Resource{}}
	var kept map[*Resource]*Resource
	if prev != nil && prev.variant != nil {
		kept = prev.variant.retagged
	}
	ls := base.Sets[ListenerType]
	out := make(map[string]*Resource, ls.Len())
	for name, r := range ls.Resources {
		if k := kept[r]; k != nil {
			out[name], v.retagged[r] = k, k
			continue
		}
		b, changed, err := rt.listener(r.Any.GetValue())
		switch {
		case err != nil:
			g.log.Debug("class generated for a variant", "class", key, "listener", name, "reason", err)
			return nil, false
		case changed:
			out[name] = rawResource(name, ListenerType, b)
		default:
			out[name] = r
		}
		v.retagged[r] = out[name]
	}
	c := *base
	c.Class = key
	c.Sets = maps.Clone(base.Sets)
	c.Sets[ListenerType] = newSetSorted(ListenerType, out, ls.Names, ls.replaced(out, ls.Names))
	c.variant = v
	sc := *base.scope
	sc.Proxy = p
	sc.tel = g.classTelemetry(sc.w.unrecorded(), p)
	c.scope = &sc
	return &c, true
}

// retag rewrites the service tags of a listener's connection managers
// from one proxy's values to another's.
type retag struct{ from, to map[string]string }

// dryRunMark is a tag generation puts beside the service tags and only
// then (tracingTags): its absence says a connection manager's tags are
// not Istio's, whatever their names.
const dryRunMark = "istio.authorization.dry_run.allow_policy.name"

var (
	fieldFilters      = fieldNum(&listenerv3.FilterChain{}, "filters")
	fieldTypedConfig  = fieldNum(&listenerv3.Filter{}, "typed_config")
	fieldAnyType      = fieldNum(&anypb.Any{}, "type_url")
	fieldAnyValue     = fieldNum(&anypb.Any{}, "value")
	fieldHCMTracing   = fieldNum(&hcmv3.HttpConnectionManager{}, "tracing")
	fieldCustomTags   = fieldNum(&hcmv3.HttpConnectionManager_Tracing{}, "custom_tags")
	fieldTagName      = fieldNum(&tracingv3.CustomTag{}, "tag")
	fieldTagLiteral   = fieldNum(&tracingv3.CustomTag{}, "literal")
	fieldLiteralValue = fieldNum(&tracingv3.CustomTag_Literal{}, "value")
	hcmTypeURL        = "type.googleapis.com/" + string(proto.MessageName(&hcmv3.HttpConnectionManager{}))
)

func fieldNum(m proto.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// listener rewrites a marshaled Listener; changed is false (and b is
// returned) when it has nothing to rewrite.
func (t retag) listener(b []byte) ([]byte, bool, error) {
	return rewriteFields(b, func(n protowire.Number, v []byte) ([]byte, bool, error) {
		if n != fieldChains && n != fieldDefaultChain {
			return nil, false, nil
		}
		return rewriteFields(v, t.chain)
	})
}

func (t retag) chain(n protowire.Number, v []byte) ([]byte, bool, error) {
	if n != fieldFilters {
		return nil, false, nil
	}
	return rewriteFields(v, func(n protowire.Number, v []byte) ([]byte, bool, error) {
		if n != fieldTypedConfig {
			return nil, false, nil
		}
		return t.typedConfig(v)
	})
}

// typedConfig rewrites a filter's Any if it holds a connection manager.
func (t retag) typedConfig(a []byte) ([]byte, bool, error) {
	var typeURL string
	if _, _, err := rewriteFields(a, func(n protowire.Number, v []byte) ([]byte, bool, error) {
		if n == fieldAnyType {
			typeURL = string(v)
		}
		return nil, false, nil
	}); err != nil {
		return nil, false, err
	}
	if typeURL != hcmTypeURL {
		return a, false, nil
	}
	return rewriteFields(a, func(n protowire.Number, v []byte) ([]byte, bool, error) {
		if n != fieldAnyValue {
			return nil, false, nil
		}
		return rewriteFields(v, func(n protowire.Number, v []byte) ([]byte, bool, error) {
			if n != fieldHCMTracing {
				return nil, false, nil
			}
			return t.tracing(v)
		})
	})
}

// tracing rewrites a connection manager's tracing: each service tag must
// be there once, a literal of the representative's value, beside the
// dry-run tags; without those there are no service tags to rewrite.
func (t retag) tracing(tr []byte) ([]byte, bool, error) {
	seen := map[string]int{}
	marked := false
	_, _, err := rewriteFields(tr, func(n protowire.Number, v []byte) ([]byte, bool, error) {
		if n != fieldCustomTags {
			return nil, false, nil
		}
		name, lit, isLit, err := customTag(v)
		if err != nil {
			return nil, false, err
		}
		if name == dryRunMark {
			marked = true
		}
		if want, ok := t.from[name]; ok {
			seen[name]++
			if !isLit || lit != want {
				return nil, false, errNotVariant
			}
		}
		return nil, false, nil
	})
	switch {
	case err != nil && !marked && errors.Is(err, errNotVariant):
		// A custom tag of a service tag's name, without Istio's tags:
		// the user's, the same for every proxy.
		return tr, false, nil
	case err != nil:
		return nil, false, err
	case !marked:
		return tr, false, nil
	}
	for name := range t.from {
		if seen[name] != 1 {
			return nil, false, errNotVariant
		}
	}
	return rewriteFields(tr, func(n protowire.Number, v []byte) ([]byte, bool, error) {
		if n != fieldCustomTags {
			return nil, false, nil
		}
		name, _, _, _ := customTag(v)
		to, ok := t.to[name]
		if !ok || to == t.from[name] {
			return nil, false, nil
		}
		return rewriteFields(v, func(n protowire.Number, v []byte) ([]byte, bool, error) {
			if n != fieldTagLiteral {
				return nil, false, nil
			}
			return rewriteFields(v, func(n protowire.Number, _ []byte) ([]byte, bool, error) {
				if n != fieldLiteralValue {
					return nil, false, nil
				}
				return []byte(to), true, nil
			})
		})
	})
}

// customTag reads a marshaled CustomTag's name and, if it is a literal,
// its value.
func customTag(b []byte) (name, literal string, isLiteral bool, err error) {
	_, _, err = rewriteFields(b, func(n protowire.Number, v []byte) ([]byte, bool, error) {
		switch n {
		case fieldTagName:
			name = string(v)
		case fieldTagLiteral:
			isLiteral = true
			_, _, err := rewriteFields(v, func(n protowire.Number, v []byte) ([]byte, bool, error) {
				if n == fieldLiteralValue {
					literal = string(v)
				}
				return nil, false, nil
			})
			return nil, false, err
		}
		return nil, false, nil
	})
	return name, literal, isLiteral, err
}

// rewriteFields returns the marshaled message m with each of its
// length-delimited fields replaced by what fn returns for it when fn
// reports a change; changed is false, and m is returned, when fn changed
// none. Fields keep their order, so a message marshaled deterministically
// stays what marshaling the changed message gives.
func rewriteFields(m []byte, fn func(protowire.Number, []byte) ([]byte, bool, error)) (_ []byte, changed bool, _ error) {
	var out []byte
	for i := 0; i < len(m); {
		num, typ, n := protowire.ConsumeTag(m[i:])
		if n < 0 {
			return nil, false, protowire.ParseError(n)
		}
		size := protowire.ConsumeFieldValue(num, typ, m[i+n:])
		if size < 0 {
			return nil, false, protowire.ParseError(size)
		}
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(m[i+n:])
			nv, ch, err := fn(num, v)
			if err != nil {
				return nil, false, err
			}
			if ch {
				if !changed {
					out = append(make([]byte, 0, len(m)+64), m[:i]...)
					changed = true
				}
				out = protowire.AppendTag(out, num, typ)
				out = protowire.AppendBytes(out, nv)
				i += n + size
				continue
			}
		}
		if changed {
			out = append(out, m[i:i+n+size]...)
		}
		i += n + size
	}
	if !changed {
		return m, false, nil
	}
	return out, true, nil
}
