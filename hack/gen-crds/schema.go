package main

import (
	"fmt"
	"math"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// schemaBuilder turns protobuf message descriptors into structural OpenAPI
// v3 schemas the way Istio's generator (istio/tools cmd/protoc-gen-crd)
// does, so that the API server gives an object the same verdict under
// either CRD:
//
//   - field names are the JSON names; enums are strings of their value
//     names;
//   - scalars as Istio maps them: 32-bit integers bounded, 64-bit integers
//     "integer" (int64 format, or minimum 0 when unsigned), float and
//     double "number" (double format), bytes "string" (byte format: base64,
//     which the API server checks);
//   - the well-known types by their JSON form (wellKnown), Duration with
//     Istio's rule that it be a valid duration of at least 1ms;
//   - a protobuf oneof becomes an OpenAPI oneOf: none or exactly one of
//     its fields (several oneofs: allOf of such);
//   - fields marked REQUIRED (google.api.field_behavior) are required;
//   - then the markers in the comments (applyMarkers).
type schemaBuilder struct {
	src *protoSource
	// stack holds the messages being expanded, to cut recursion.
	stack map[protoreflect.FullName]bool
}

func newSchemaBuilder(src *protoSource) *schemaBuilder {
	return &schemaBuilder{src: src, stack: map[protoreflect.FullName]bool{}}
}

func ptr[T any](v T) *T { return &v }

// preserve is an object whose fields are not checked: the JSON form of
// google.protobuf.Struct and Any, and the cut in a recursive message.
func preserve() apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)}
}

func uint32Schema() apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{Type: "integer", Minimum: ptr(0.0), Maximum: ptr(float64(math.MaxUint32))}
}

// durationRule is the rule Istio's generator puts on every
// google.protobuf.Duration (a field opts out with
// +protoc-gen-crd:duration-validation:none). It is derived from the type,
// not from an annotation.
var durationRule = apiextv1.ValidationRule{Rule: "duration(self) >= duration('1ms')", Message: "must be a valid duration greater than 1ms"}

// wellKnown maps the google.protobuf types to their JSON forms, as Istio's
// generator does (its specialTypes); other google.protobuf messages are
// built from their descriptors.
func wellKnown(name protoreflect.FullName) (apiextv1.JSONSchemaProps, bool) {
	switch name {
	case "google.protobuf.Duration":
		return apiextv1.JSONSchemaProps{Type: "string", XValidations: []apiextv1.ValidationRule{durationRule}}, true
	case "google.protobuf.Timestamp":
		return apiextv1.JSONSchemaProps{Type: "string", Format: "date-time"}, true
	case "google.protobuf.Struct", "google.protobuf.Any":
		return preserve(), true
	case "google.protobuf.Value":
		return apiextv1.JSONSchemaProps{XPreserveUnknownFields: ptr(true)}, true
	case "google.protobuf.ListValue":
		return apiextv1.JSONSchemaProps{Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &apiextv1.JSONSchemaProps{Type: "object"}}}, true
	case "google.protobuf.Empty":
		return apiextv1.JSONSchemaProps{Type: "object", MaxProperties: ptr(int64(0))}, true
	case "google.protobuf.BoolValue":
		return apiextv1.JSONSchemaProps{Type: "boolean", Nullable: true}, true
	case "google.protobuf.StringValue":
		return apiextv1.JSONSchemaProps{Type: "string", Nullable: true}, true
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue":
		return apiextv1.JSONSchemaProps{Type: "number", Format: "double", Nullable: true}, true
	case "google.protobuf.Int32Value":
		return apiextv1.JSONSchemaProps{Type: "integer", Format: "int32", Nullable: true}, true
	case "google.protobuf.Int64Value":
		return apiextv1.JSONSchemaProps{Type: "integer", Format: "int64", Nullable: true}, true
	case "google.protobuf.UInt32Value":
		s := uint32Schema()
		s.Nullable = true
		return s, true
	case "google.protobuf.UInt64Value":
		return apiextv1.JSONSchemaProps{Type: "integer", Minimum: ptr(0.0), Nullable: true}, true
	}
	return apiextv1.JSONSchemaProps{}, false
}

// message returns the schema of a message: an object with one property
// per field (and per alternative name), its oneofs, its required fields in
// declaration order, then the markers of the message's comment.
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
		comment, err := b.src.comment(fd)
		if err != nil {
			return out, err
		}
		if alt := altName(comment); alt != "" {
			out.Properties[alt] = s
		}
	}
	var groups []apiextv1.JSONSchemaProps
	oneofs := md.Oneofs()
	for i := 0; i < oneofs.Len(); i++ {
		var members []apiextv1.JSONSchemaProps
		of := oneofs.Get(i).Fields()
		for j := 0; j < of.Len(); j++ {
			members = append(members, apiextv1.JSONSchemaProps{Required: []string{of.Get(j).JSONName()}})
		}
		none := apiextv1.JSONSchemaProps{Not: &apiextv1.JSONSchemaProps{AnyOf: members}}
		groups = append(groups, apiextv1.JSONSchemaProps{OneOf: append([]apiextv1.JSONSchemaProps{none}, members...)})
	}
	switch len(groups) {
	case 0:
	case 1:
		out.OneOf = groups[0].OneOf
	default:
		out.AllOf = groups
	}
	comment, err := b.src.comment(md)
	if err != nil {
		return out, err
	}
	if err := applyMarkers(&out, comment); err != nil {
		return out, fmt.Errorf("%s: %w", md.FullName(), err)
	}
	return out, nil
}

// altName is the second property name a field's comment may give it
// (+kubebuilder:altName=jwks_uri): Istio accepts both spellings.
func altName(comment string) string {
	_, rest, ok := strings.Cut(comment, "+kubebuilder:altName=")
	if !ok {
		return ""
	}
	if f := strings.Fields(rest); len(f) > 0 {
		return f[0]
	}
	return ""
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
// additionalProperties, repeated fields as arrays, the rest by kind; then
// the markers of the field's comment.
func (b *schemaBuilder) field(fd protoreflect.FieldDescriptor) (apiextv1.JSONSchemaProps, error) {
	var s apiextv1.JSONSchemaProps
	switch {
	case fd.IsMap():
		v, err := b.single(fd.MapValue())
		if err != nil {
			return v, err
		}
		s = apiextv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextv1.JSONSchemaPropsOrBool{Allows: true, Schema: &v}}
	default:
		item, err := b.single(fd)
		if err != nil {
			return item, err
		}
		s = item
		if fd.IsList() {
			s = apiextv1.JSONSchemaProps{Type: "array", Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &item}}
		}
	}
	comment, err := b.src.comment(fd)
	if err != nil {
		return s, err
	}
	return s, applyMarkers(&s, comment)
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
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return apiextv1.JSONSchemaProps{Type: "integer", Format: "int64"}, nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return apiextv1.JSONSchemaProps{Type: "integer", Minimum: ptr(0.0)}, nil
	case protoreflect.FloatKind, protoreflect.DoubleKind:
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
	out := apiextv1.JSONSchemaProps{Type: "string"}
	values := ed.Values()
	for i := 0; i < values.Len(); i++ {
		out.Enum = append(out.Enum, apiextv1.JSON{Raw: []byte(fmt.Sprintf("%q", values.Get(i).Name()))})
	}
	return out
}
