package install

import (
	"encoding/json"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/reflect/protoreflect"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/meshplane/discovery/pkg/mesh"
)

// meshConfig (spec.meshConfig over values.meshConfig) is Istio's
// MeshConfig: written to the istio ConfigMap, which the server reads.
// The installer checks it with the server's own parser (pkg/mesh: Istio's
// decoding, Go durations included, and Istio's validation), so that an
// install never writes a MeshConfig the server would refuse, and warns
// about the fields the server reports as not applied.

// parseMeshConfig reads a meshConfig subtree as the server will.
func parseMeshConfig(v any) (*mesh.Config, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return mesh.Parse(string(b))
}

// checkMeshConfig refuses a meshConfig subtree the server would refuse
// (wrong types, invalid values) and, stricter than istiod, fields
// MeshConfig does not have: at install time an unknown field is a typo.
func checkMeshConfig(v any, path Path) []error {
	if _, ok := v.(map[string]any); !ok {
		return []error{typeError(path, "an object", v)}
	}
	mc, err := parseMeshConfig(v)
	if err != nil {
		return []error{&FieldError{Path: path, Msg: "not a valid Istio MeshConfig: " + err.Error()}}
	}
	var out []error
	for _, f := range mc.Ignored() {
		if f.Unknown {
			out = append(out, &FieldError{Path: path, Msg: fmt.Sprintf("not a valid Istio MeshConfig: unknown field %q", f.Path)})
		}
	}
	return out
}

// meshWarnings names the fields of a meshConfig subtree the server
// accepts but does not apply (mesh.Config.Ignored), with its reasons.
func meshWarnings(v any, path Path) []string {
	if _, ok := v.(map[string]any); !ok {
		return nil
	}
	mc, err := parseMeshConfig(v)
	if err != nil {
		return nil // refused by checkMeshConfig
	}
	var out []string
	for _, f := range mc.Ignored() {
		if !f.Unknown {
			out = append(out, fmt.Sprintf("%s.%s: accepted, but has no effect in discovery (%s)", path, f.Path, f.Reason))
		}
	}
	return append(out, mc.Warnings()...)
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
