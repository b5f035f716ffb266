package install

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// meshConfig (spec.meshConfig over values.meshConfig) is Istio's
// MeshConfig: checked with protojson, written to the istio ConfigMap for
// Istio's tools, and read in discovery only where meshEffects says.

// meshEffects are the MeshConfig fields discovery acts on; the others
// are accepted with a warning.
var meshEffects = map[string]string{
	"defaultConfig": "the proxies' ProxyConfig (the injector)",
	"trustDomain":   "--trust-domain",
	"rootNamespace": "istio-system only",
}

// rootNamespace is where discovery looks for mesh-wide configuration.
const rootNamespace = "istio-system"

// checkMeshConfig parses the meshConfig subtree as Istio's MeshConfig:
// unknown fields and wrong types are refused with protojson's message.
func checkMeshConfig(v any, path Path) []error {
	if _, ok := v.(map[string]any); !ok {
		return []error{typeError(path, "an object", v)}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return []error{&FieldError{Path: path, Msg: err.Error()}}
	}
	if err := protojson.Unmarshal(b, &meshv1alpha1.MeshConfig{}); err != nil {
		return []error{&FieldError{Path: path, Msg: "not a valid Istio MeshConfig: " + err.Error()}}
	}
	return nil
}

// meshWarnings names the fields of a meshConfig subtree that change
// nothing in discovery.
func meshWarnings(v any, path Path) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	for _, k := range sortedKeys(m) {
		p := path.child(keyStep(k))
		switch {
		case k == "rootNamespace":
			if s, _ := m[k].(string); s != rootNamespace {
				out = append(out, noEffect(p, "discovery's root namespace is "+rootNamespace))
			}
		case meshEffects[k] == "":
			out = append(out, noEffect(p, "written to the istio ConfigMap for Istio's tools; discovery does not read it"))
		}
	}
	return out
}

func noEffect(p Path, why string) string {
	return fmt.Sprintf("%s: accepted, but has no effect in discovery (%s)", p, why)
}

var meshDescriptor = (&meshv1alpha1.MeshConfig{}).ProtoReflect().Descriptor()

// meshScalar reads a --set value inside meshConfig as the MeshConfig
// field at rest expects it: text for strings (proxyMetadata values stay
// "true"), booleans and numbers for theirs; elsewhere as inferScalar.
func meshScalar(rest Path, raw string) any {
	fd := meshField(meshDescriptor, rest)
	if fd == nil {
		return inferScalar(raw)
	}
	kind := fd.Kind()
	if fd.IsMap() {
		kind = fd.MapValue().Kind()
		if fd.MapValue().Kind() == protoreflect.MessageKind {
			return inferScalar(raw)
		}
	}
	if kind == protoreflect.MessageKind {
		switch fd.Message().FullName() {
		case "google.protobuf.BoolValue":
			kind = protoreflect.BoolKind
		case "google.protobuf.StringValue", "google.protobuf.Duration":
			kind = protoreflect.StringKind
		case "google.protobuf.Int32Value", "google.protobuf.UInt32Value", "google.protobuf.Int64Value", "google.protobuf.DoubleValue":
			kind = protoreflect.DoubleKind
		default:
			return inferScalar(raw)
		}
	}
	switch kind {
	case protoreflect.StringKind, protoreflect.EnumKind, protoreflect.BytesKind:
		return raw
	case protoreflect.BoolKind:
		if b, err := strconv.ParseBool(raw); err == nil {
			return b
		}
	default:
		if f, err := strconv.ParseFloat(raw, 64); err == nil {
			return f
		}
	}
	return raw // protojson names the problem
}

// meshField finds the field rest leads to: message fields by JSON or
// proto name, map keys and list indexes passed through.
func meshField(md protoreflect.MessageDescriptor, rest Path) protoreflect.FieldDescriptor {
	var fd protoreflect.FieldDescriptor
	for i := 0; i < len(rest); i++ {
		st := rest[i]
		if fd != nil {
			switch {
			case fd.IsMap():
				if !st.IsKey() || fd.MapValue().Kind() != protoreflect.MessageKind {
					if i == len(rest)-1 {
						return fd
					}
					return nil
				}
				md = fd.MapValue().Message()
				fd = nil
				continue
			case fd.IsList() && !st.IsKey():
				if fd.Kind() != protoreflect.MessageKind {
					if i == len(rest)-1 {
						return fd
					}
					return nil
				}
				md = fd.Message()
				fd = nil
				continue
			case fd.Kind() == protoreflect.MessageKind:
				md = fd.Message()
			default:
				return nil
			}
		}
		if !st.IsKey() || md == nil {
			return nil
		}
		fields := md.Fields()
		fd = fields.ByJSONName(st.Key)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(st.Key))
		}
		if fd == nil {
			return nil
		}
	}
	if fd != nil && (fd.IsMap() || fd.IsList()) {
		return nil
	}
	return fd
}

// meshEffectNames lists meshEffects, for messages.
func meshEffectNames() []string {
	out := make([]string, 0, len(meshEffects))
	for k := range meshEffects {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
