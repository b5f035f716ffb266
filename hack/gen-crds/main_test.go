package main

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	apiextinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/model"
)

const committed = "../../manifests/charts/base/files/crd-all.gen.yaml"

var (
	apiDirOnce sync.Once
	apiDir     string
	apiDirErr  error
)

// testAPIDir is the istio.io/api module directory that go.mod requires.
func testAPIDir(t *testing.T) string {
	t.Helper()
	apiDirOnce.Do(func() { apiDir, apiDirErr = apiModuleDir() })
	if apiDirErr != nil {
		t.Fatal(apiDirErr)
	}
	return apiDir
}

// generated returns the generated CRDs.
func generated(t *testing.T) []*apiextv1.CustomResourceDefinition {
	t.Helper()
	crds, err := buildCRDs(newProtoSource(testAPIDir(t)))
	if err != nil {
		t.Fatal(err)
	}
	return crds
}

func TestCommittedFileIsCurrent(t *testing.T) {
	want, err := Generate(testAPIDir(t))
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("%s is out of date: run hack/gen-crds.sh", committed)
	}
}

func TestEverySchemaIsStructural(t *testing.T) {
	for _, crd := range generated(t) {
		k := crd.Spec.Names
		storage := 0
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				storage++
			}
			var internal apiextinternal.JSONSchemaProps
			if err := apiextv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
				t.Fatal(err)
			}
			s, err := structuralschema.NewStructural(&internal)
			if err != nil {
				t.Fatalf("%s %s: %v", k.Kind, v.Name, err)
			}
			if errs := structuralschema.ValidateStructural(field.NewPath("schema"), s); len(errs) > 0 {
				t.Fatalf("%s %s is not structural: %v", k.Kind, v.Name, errs.ToAggregate())
			}
		}
		if storage != 1 {
			t.Errorf("%s has %d storage versions", k.Kind, storage)
		}
	}
}

// specOf returns the spec schema of a generated CRD.
func specOf(t *testing.T, kind string) apiextv1.JSONSchemaProps {
	t.Helper()
	for _, crd := range generated(t) {
		if crd.Spec.Names.Kind == kind {
			return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		}
	}
	t.Fatalf("no kind %s", kind)
	return apiextv1.JSONSchemaProps{}
}

// at walks properties (and array items, written "[]", and map values,
// written "{}") of s.
func at(t *testing.T, s apiextv1.JSONSchemaProps, path string) apiextv1.JSONSchemaProps {
	t.Helper()
	for _, step := range strings.Split(path, ".") {
		if step == "[]" {
			if s.Items == nil || s.Items.Schema == nil {
				t.Fatalf("%s: no items at %q", path, step)
			}
			s = *s.Items.Schema
			continue
		}
		if step == "{}" {
			if s.AdditionalProperties == nil || s.AdditionalProperties.Schema == nil {
				t.Fatalf("%s: no map values at %q", path, step)
			}
			s = *s.AdditionalProperties.Schema
			continue
		}
		next, ok := s.Properties[step]
		if !ok {
			t.Fatalf("%s: no property %q", path, step)
		}
		s = next
	}
	return s
}

func TestFieldMapping(t *testing.T) {
	tests := map[string]struct {
		kind, path string
		want       string // the schema as compact YAML
	}{
		"a Duration is a string of at least 1ms": {
			kind: "VirtualService", path: "http.[].timeout",
			want: "type: string\nx-kubernetes-validations:\n- message: must be a valid duration greater than 1ms\n  rule: duration(self) >= duration('1ms')",
		},
		"a Duration marked duration-validation:none has no rule": {
			kind: "DestinationRule", path: "trafficPolicy.loadBalancer.consistentHash.httpCookie.ttl", want: "type: string",
		},
		"a 64-bit unsigned integer is a non-negative integer": {
			kind: "DestinationRule", path: "trafficPolicy.loadBalancer.consistentHash.minimumRingSize", want: "minimum: 0\ntype: integer",
		},
		"bytes are base64": {
			kind: "VirtualService", path: "http.[].directResponse.body.bytes", want: "format: byte\ntype: string",
		},
		"a protobuf oneof is an OpenAPI oneOf of none or one": {
			kind: "VirtualService", path: "http.[].redirect",
			want: "oneOf:\n- not:\n    anyOf:\n    - required:\n      - port\n    - required:\n      - derivePort\n- required:\n  - port\n- required:\n  - derivePort\ntype: object",
		},
		"map-value markers apply to the values": {
			kind: "Sidecar", path: "workloadSelector.labels.{}",
			want: "maxLength: 63\ntype: string\nx-kubernetes-validations:\n- message: wildcard is not supported in selector\n  rule: '!self.contains(\"*\")'",
		},
		"list-value markers apply to the items, list markers to the list": {
			kind: "ServiceEntry", path: "hosts",
			want: "items:\n  type: string\n  x-kubernetes-validations:\n  - message: hostname cannot be wildcard\n    rule: self != \"*\"\nmaxItems: 256\nminItems: 1\ntype: array",
		},
		"an alternative name is a second property with the same schema": {
			kind: "RequestAuthentication", path: "jwtRules.[].jwks_uri",
			want: "maxLength: 2048\nminLength: 1\ntype: string\nx-kubernetes-validations:\n- message: url must have scheme http:// or https://\n  rule: url(self).getScheme() in [\"http\", \"https\"]",
		},
		"a wrapper is its nullable scalar": {
			kind: "VirtualService", path: "http.[].corsPolicy.allowCredentials", want: "nullable: true\ntype: boolean",
		},
		"a uint32 is a bounded integer": {
			kind: "VirtualService", path: "http.[].route.[].destination.port.number", want: "maximum: 4294967295\nminimum: 0\ntype: integer",
		},
		"a double is a double number": {
			kind: "VirtualService", path: "http.[].fault.delay.percentage.value", want: "format: double\ntype: number",
		},
		"an int32 is an int32 integer": {
			kind: "VirtualService", path: "http.[].route.[].weight", want: "format: int32\ntype: integer",
		},
		"an enum is a string of its value names": {
			kind: "PeerAuthentication", path: "mtls.mode", want: "enum:\n- UNSET\n- DISABLE\n- PERMISSIVE\n- STRICT\ntype: string",
		},
		"a string map is an object of strings": {
			kind: "VirtualService", path: "http.[].headers.request.set", want: "additionalProperties:\n  type: string\ntype: object",
		},
		"a repeated string is an array of strings": {
			kind: "Gateway", path: "servers.[].hosts", want: "items:\n  type: string\ntype: array",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := at(t, specOf(t, tc.kind), tc.path)
			s.Description = ""
			s.Properties = nil // the node's own constraints
			b, err := yaml.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(b)); got != tc.want {
				t.Errorf("%s %s:\n%s\nwant:\n%s", tc.kind, tc.path, got, tc.want)
			}
		})
	}
}

func TestRequiredFieldsComeFromFieldBehavior(t *testing.T) {
	dest := at(t, specOf(t, "VirtualService"), "http.[].route.[].destination")
	if strings.Join(dest.Required, ",") != "host" {
		t.Errorf("Destination.required = %v, want [host]", dest.Required)
	}
	route := at(t, specOf(t, "VirtualService"), "http.[].route.[]")
	if strings.Join(route.Required, ",") != "destination" {
		t.Errorf("HTTPRouteDestination.required = %v, want [destination]", route.Required)
	}
}

func TestRecursionIsCutWithPreservedFields(t *testing.T) {
	// A message that contains itself, through the test's own descriptor
	// pool, so that the test does not depend on which Istio message
	// happens to recurse.
	md := recursiveMessage(t)
	src := &protoSource{
		comments: protoComments{"test.Node": "", "test.Node.name": "", "test.Node.child": ""},
		read:     map[string]bool{"test/node.proto": true},
	}
	s, err := newSchemaBuilder(src).message(md)
	if err != nil {
		t.Fatal(err)
	}
	child := s.Properties["child"]
	if child.XPreserveUnknownFields == nil || !*child.XPreserveUnknownFields || child.Type != "object" || len(child.Properties) != 0 {
		t.Errorf("recursive field = %+v, want an object that preserves unknown fields", child)
	}
	if s.Properties["name"].Type != "string" {
		t.Errorf("name = %+v", s.Properties["name"])
	}
}

func TestEveryKindDiscoveryReadsHasACRD(t *testing.T) {
	var have []string
	for _, crd := range generated(t) {
		have = append(have, crd.Spec.Names.Kind)
	}
	var want []string
	for _, k := range model.IstioKinds {
		want = append(want, string(k))
	}
	if strings.Join(have, ",") != strings.Join(want, ",") {
		t.Errorf("CRDs for %v, want model.IstioKinds %v", have, want)
	}
}

func recursiveMessage(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("test/node.proto"),
		Package: proto.String("test"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Node"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("name"), JsonName: proto.String("name"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()},
				{Name: proto.String("child"), JsonName: proto.String("child"), Number: proto.Int32(2), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), TypeName: proto.String(".test.Node"), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()},
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}
