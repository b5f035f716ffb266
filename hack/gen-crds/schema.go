package main

import (
	"fmt"
	"math"
	"sort"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// schemaBuilder turns protobuf message descriptors into structural OpenAPI
// v3 schemas, following the protobuf JSON mapping that Istio's clients use:
// lowerCamelCase field names, enums by name, well-known types by their JSON
// form.
type schemaBuilder struct {
	// stack holds the messages being expanded, to cut recursion.
	stack map[protoreflect.FullName]bool
}

func newSchemaBuilder() *schemaBuilder {
	return &schemaBuilder{stack: map[protoreflect.FullName]bool{}}
}

// preserve is an object whose fields are not checked: the JSON form of
// google.protobuf.Struct, and the cut in a recursive message.
func preserve() apiextv1.JSONSchemaProps {
	t := true
	return apiextv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &t}
}

// anyValue accepts any JSON value: google.protobuf.Value.
func anyValue() apiextv1.JSONSchemaProps {
	t := true
	return apiextv1.JSONSchemaProps{XPreserveUnknownFields: &t}
}

// intOrString accepts an integer or its decimal string: the protobuf JSON
// form of 64-bit integers, which encoders write as strings.
func intOrString() apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{XIntOrString: true}
}

func uint32Schema() apiextv1.JSONSchemaProps {
	lo, hi := 0.0, float64(math.MaxUint32)
	return apiextv1.JSONSchemaProps{Type: "integer", Minimum: &lo, Maximum: &hi}
}

// wellKnown maps the google.protobuf types to their JSON forms.
func wellKnown(name protoreflect.FullName) (apiextv1.JSONSchemaProps, bool) {
	nullable := func(s apiextv1.JSONSchemaProps) apiextv1.JSONSchemaProps { s.Nullable = true; return s }
	switch name {
	case "google.protobuf.Duration":
		return apiextv1.JSONSchemaProps{Type: "string"}, true
	case "google.protobuf.Timestamp":
		return apiextv1.JSONSchemaProps{Type: "string", Format: "date-time"}, true
	case "google.protobuf.Struct", "google.protobuf.Any":
		return preserve(), true
	case "google.protobuf.Value":
		return anyValue(), true
	case "google.protobuf.ListValue":
		v := anyValue()
		return apiextv1.JSONSchemaProps{Type: "array", Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &v}}, true
	case "google.protobuf.Empty":
		return apiextv1.JSONSchemaProps{Type: "object"}, true
	case "google.protobuf.BoolValue":
		return nullable(apiextv1.JSONSchemaProps{Type: "boolean"}), true
	case "google.protobuf.StringValue":
		return nullable(apiextv1.JSONSchemaProps{Type: "string"}), true
	case "google.protobuf.BytesValue":
		return nullable(apiextv1.JSONSchemaProps{Type: "string", Format: "byte"}), true
	case "google.protobuf.DoubleValue":
		return nullable(apiextv1.JSONSchemaProps{Type: "number", Format: "double"}), true
	case "google.protobuf.FloatValue":
		return nullable(apiextv1.JSONSchemaProps{Type: "number", Format: "float"}), true
	case "google.protobuf.Int32Value":
		return nullable(apiextv1.JSONSchemaProps{Type: "integer", Format: "int32"}), true
	case "google.protobuf.UInt32Value":
		return nullable(uint32Schema()), true
	case "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
		return nullable(intOrString()), true
	}
	return apiextv1.JSONSchemaProps{}, false
}

// message returns the schema of a message: an object with one property
// per field (oneof members are plain optional fields), and the fields
// marked REQUIRED (google.api.field_behavior) as required.
func (b *schemaBuilder) message(md protoreflect.MessageDescriptor) (apiextv1.JSONSchemaProps, error) {
	if s, ok := wellKnown(md.FullName()); ok {
		return s, nil
	}
	if b.stack[md.FullName()] {
		return preserve(), nil
	}
	b.stack[md.FullName()] = true
	defer delete(b.stack, md.FullName())

	out := apiextv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{}}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		s, err := b.field(fd)
		if err != nil {
			return out, fmt.Errorf("%s: %w", fd.FullName(), err)
		}
		out.Properties[fd.JSONName()] = s
		if required(fd) {
			out.Required = append(out.Required, fd.JSONName())
		}
	}
	sort.Strings(out.Required)
	return out, nil
}

func required(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	if opts == nil {
		return false
	}
	behaviors, _ := proto.GetExtension(opts, annotations.E_FieldBehavior).([]annotations.FieldBehavior)
	for _, fb := range behaviors {
		if fb == annotations.FieldBehavior_REQUIRED {
			return true
		}
	}
	return false
}

// field returns the schema of a field: maps as objects with
// additionalProperties, repeated fields as arrays, the rest by kind.
func (b *schemaBuilder) field(fd protoreflect.FieldDescriptor) (apiextv1.JSONSchemaProps, error) {
	if fd.IsMap() {
		v, err := b.single(fd.MapValue())
		if err != nil {
			return v, err
		}
		return apiextv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextv1.JSONSchemaPropsOrBool{Allows: true, Schema: &v}}, nil
	}
	s, err := b.single(fd)
	if err != nil || !fd.IsList() {
		return s, err
	}
	return apiextv1.JSONSchemaProps{Type: "array", Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &s}}, nil
}

// single is the schema of one value of fd's type.
func (b *schemaBuilder) single(fd protoreflect.FieldDescriptor) (apiextv1.JSONSchemaProps, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return apiextv1.JSONSchemaProps{Type: "boolean"}, nil
	case protoreflect.StringKind:
		return apiextv1.JSONSchemaProps{Type: "string"}, nil
	case protoreflect.BytesKind:
		return apiextv1.JSONSchemaProps{Type: "string", Format: "byte"}, nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return apiextv1.JSONSchemaProps{Type: "integer", Format: "int32"}, nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return uint32Schema(), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return intOrString(), nil
	case protoreflect.FloatKind:
		return apiextv1.JSONSchemaProps{Type: "number", Format: "float"}, nil
	case protoreflect.DoubleKind:
		return apiextv1.JSONSchemaProps{Type: "number", Format: "double"}, nil
	case protoreflect.EnumKind:
		return enum(fd.Enum()), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return b.message(fd.Message())
	}
	return apiextv1.JSONSchemaProps{}, fmt.Errorf("unsupported field kind %s", fd.Kind())
}

// enum is a string restricted to the enum's value names, in declaration
// order.
func enum(ed protoreflect.EnumDescriptor) apiextv1.JSONSchemaProps {
	if ed.FullName() == "google.protobuf.NullValue" {
		return apiextv1.JSONSchemaProps{Type: "string", Nullable: true}
	}
	out := apiextv1.JSONSchemaProps{Type: "string"}
	values := ed.Values()
	for i := 0; i < values.Len(); i++ {
		out.Enum = append(out.Enum, apiextv1.JSON{Raw: []byte(fmt.Sprintf("%q", values.Get(i).Name()))})
	}
	return out
}
