package main

import (
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func stringList() apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{Type: "array", Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &apiextv1.JSONSchemaProps{Type: "string"}}}
}

func stringMap() apiextv1.JSONSchemaProps {
	return apiextv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextv1.JSONSchemaPropsOrBool{Allows: true, Schema: &apiextv1.JSONSchemaProps{Type: "string"}}}
}

func duration() apiextv1.JSONSchemaProps {
	s, _ := wellKnown("google.protobuf.Duration")
	return s
}

func TestApplyMarkers(t *testing.T) {
	tests := map[string]struct {
		schema  apiextv1.JSONSchemaProps
		comment string
		want    string // the schema as compact YAML
	}{
		"prose and other markers are ignored": {
			schema:  apiextv1.JSONSchemaProps{Type: "string"},
			comment: " A name.\n +optional\n +kubetype-gen\n",
			want:    "type: string",
		},
		"list markers on the list, list-value markers on the items": {
			schema:  stringList(),
			comment: " +kubebuilder:validation:MaxItems=16\n +kubebuilder:validation:MinItems=1\n +protoc-gen-crd:list-value-validation:MaxLength=320\n +protoc-gen-crd:list-value-validation:XValidation:message=\"not a wildcard\",rule=\"self != '*'\"\n",
			want:    "items:\n  maxLength: 320\n  type: string\n  x-kubernetes-validations:\n  - message: not a wildcard\n    rule: self != \"*\"\nmaxItems: 16\nminItems: 1\ntype: array",
		},
		"map markers on the map, map-value markers on the values": {
			schema:  stringMap(),
			comment: " +kubebuilder:validation:MaxProperties=4096\n +kubebuilder:validation:XValidation:message=\"no empty key\",rule=\"self.all(key, key.size() != 0)\"\n +protoc-gen-crd:map-value-validation:MaxLength=63\n",
			want:    "additionalProperties:\n  maxLength: 63\n  type: string\nmaxProperties: 4096\ntype: object\nx-kubernetes-validations:\n- message: no empty key\n  rule: self.all(key, key.size() != 0)",
		},
		"a rule keeps its inner double quotes": {
			schema:  apiextv1.JSONSchemaProps{Type: "object"},
			comment: ` +kubebuilder:validation:XValidation:message="UDS may not include ports",rule="(default(self.address, "").startsWith('unix://')) ? !has(self.ports) : true"` + "\n",
			want:    "type: object\nx-kubernetes-validations:\n- message: UDS may not include ports\n  rule: '(has(self.address) ? self.address : \"\").startsWith(\"unix://\") ? !has(self.ports)\n    : true'",
		},
		"bounds, patterns and lengths": {
			schema:  apiextv1.JSONSchemaProps{Type: "string"},
			comment: " +kubebuilder:validation:MinLength=1\n +kubebuilder:validation:MaxLength=63\n +kubebuilder:validation:Pattern=`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`\n",
			want:    "maxLength: 63\nminLength: 1\npattern: ^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$\ntype: string",
		},
		"a bare pattern": {
			schema:  apiextv1.JSONSchemaProps{Type: "string"},
			comment: " +kubebuilder:validation:Pattern=^[-_A-Za-z0-9]+$\n",
			want:    "pattern: ^[-_A-Za-z0-9]+$\ntype: string",
		},
		"numeric bounds replace the type's": {
			schema:  uint32Schema(),
			comment: " +kubebuilder:validation:Minimum=1\n +kubebuilder:validation:Maximum=65535\n",
			want:    "maximum: 65535\nminimum: 1\ntype: integer",
		},
		"duration-validation:none drops the Duration rule and ends the markers": {
			schema:  duration(),
			comment: " +protoc-gen-crd:duration-validation:none\n +kubebuilder:validation:MaxLength=3\n",
			want:    "type: string",
		},
		"a Duration keeps its rule, and more come after it": {
			schema:  duration(),
			comment: " +kubebuilder:validation:XValidation:message=\"at most 1h\",rule=\"duration(self) <= duration('1h')\"\n",
			want:    "type: string\nx-kubernetes-validations:\n- message: must be a valid duration greater than 1ms\n  rule: duration(self) >= duration('1ms')\n- message: at most 1h\n  rule: duration(self) <= duration(\"1h\")",
		},
		"XIntOrString makes an int-or-string": {
			schema:  apiextv1.JSONSchemaProps{Type: "integer", Format: "int64"},
			comment: " +protoc-gen-crd:validation:XIntOrString\n",
			want:    "anyOf:\n- type: integer\n- type: string\nx-kubernetes-int-or-string: true",
		},
		"a list map": {
			schema: apiextv1.JSONSchemaProps{Type: "array", Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &apiextv1.JSONSchemaProps{
				Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{"name": {Type: "string"}}, Required: []string{"name"},
			}}},
			comment: " +listType=map\n +listMapKey=name\n",
			want:    "items:\n  properties:\n    name:\n      type: string\n  required:\n  - name\n  type: object\ntype: array\nx-kubernetes-list-map-keys:\n- name\nx-kubernetes-list-type: map",
		},
		"IgnoreSubValidation drops the named rules below": {
			schema: apiextv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{"e": {
				Type: "object", XValidations: []apiextv1.ValidationRule{{Rule: "a", Message: "Address is required"}, {Rule: "b", Message: "kept"}},
			}}},
			comment: " +protoc-gen-crd:validation:IgnoreSubValidation:[\"Address is required\"]\n",
			want:    "properties:\n  e:\n    type: object\n    x-kubernetes-validations:\n    - message: kept\n      rule: b\ntype: object",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := tc.schema
			if err := applyMarkers(&s, tc.comment); err != nil {
				t.Fatal(err)
			}
			b, err := yaml.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(b)); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestApplyMarkersRefusesWhatIstiosGeneratorRefuses(t *testing.T) {
	tests := map[string]struct {
		schema           apiextv1.JSONSchemaProps
		comment, wantErr string
	}{
		"an unknown validation marker":      {apiextv1.JSONSchemaProps{Type: "string"}, " +kubebuilder:validation:Format=uuid\n", "unknown marker"},
		"an unknown protoc-gen-crd marker":  {apiextv1.JSONSchemaProps{Type: "string"}, " +protoc-gen-crd:something-new\n", "unknown marker"},
		"a length on an array":              {stringList(), " +kubebuilder:validation:MaxLength=3\n", "marker for a string"},
		"a count of items on a string":      {apiextv1.JSONSchemaProps{Type: "string"}, " +kubebuilder:validation:MaxItems=3\n", "marker for a array"},
		"a bound on a string":               {apiextv1.JSONSchemaProps{Type: "string"}, " +kubebuilder:validation:Maximum=3\n", "not a number"},
		"map-value markers on a list":       {stringList(), " +protoc-gen-crd:map-value-validation:MaxLength=3\n", "not a map"},
		"list-value markers on a map":       {stringMap(), " +protoc-gen-crd:list-value-validation:MaxLength=3\n", "not a list"},
		"a rule without a message":          {apiextv1.JSONSchemaProps{Type: "string"}, " +kubebuilder:validation:XValidation:rule=\"self\"\n", "message"},
		"a rule that does not parse":        {apiextv1.JSONSchemaProps{Type: "string"}, " +kubebuilder:validation:XValidation:message=\"m\",rule=\"self ==\"\n", "CEL rule"},
		"a listMapKey without listType=map": {stringList(), " +listMapKey=name\n", "listType=map"},
		"an unknown listType":               {stringList(), " +listType=bag\n", "unknown listType"},
		"a bare value with a comma":         {apiextv1.JSONSchemaProps{Type: "string"}, " +kubebuilder:validation:Pattern=a,b\n", "comma"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := tc.schema
			err := applyMarkers(&s, tc.comment)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("applyMarkers(%q) = %v, want an error containing %q", tc.comment, err, tc.wantErr)
			}
		})
	}
}

func TestCueGenTags(t *testing.T) {
	comment := ` Configuration affecting traffic routing.

 <!-- crd generation tags
 +cue-gen:VirtualService:groupName:networking.istio.io
 +cue-gen:VirtualService:versions:v1,v1beta1,v1alpha3
 +cue-gen:VirtualService:resource:categories=istio-io,networking-istio-io,shortNames=vs
 +cue-gen:VirtualService:printerColumn:name=Gateways,type=string,JSONPath=.spec.gateways,description="The names of gateways
 that should apply these routes"
 +cue-gen:VirtualService:printerColumn:name=Age,type=date,JSONPath=.metadata.creationTimestamp,description="Age"
 +cue-gen:VirtualService:subresource:status
 -->
 Not a tag: after the end marker.
 +kubebuilder:validation:XValidation:message="m",rule="self"
`
	tags, err := cueGenTags(comment)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"groupName":     "networking.istio.io",
		"versions":      "v1,v1beta1,v1alpha3",
		"resource":      "categories=istio-io,networking-istio-io,shortNames=vs",
		"printerColumn": `name=Gateways,type=string,JSONPath=.spec.gateways,description="The names of gateways that should apply these routes";;name=Age,type=date,JSONPath=.metadata.creationTimestamp,description="Age"`,
		"subresource":   "status",
	}
	if len(tags) != len(want) {
		t.Errorf("tags = %v", tags)
	}
	for k, v := range want {
		if tags[k] != v {
			t.Errorf("%s = %q, want %q", k, tags[k], v)
		}
	}
	k := crdKind{Kind: "VirtualService", Singular: "virtualservice", Plural: "virtualservices", List: "VirtualServiceList"}
	if err := k.readTags(tags); err != nil {
		t.Fatal(err)
	}
	if strings.Join(k.Versions, ",") != "v1,v1alpha3,v1beta1" || k.Storage != "v1" {
		t.Errorf("versions %v, storage %s; want v1,v1alpha3,v1beta1 stored as v1", k.Versions, k.Storage)
	}
	if strings.Join(k.Categories, ",") != "istio-io,networking-istio-io" || strings.Join(k.ShortNames, ",") != "vs" {
		t.Errorf("categories %v, short names %v", k.Categories, k.ShortNames)
	}
	if len(k.Columns) != 2 || k.Columns[0].Description != "The names of gateways that should apply these routes" || k.Columns[1].JSONPath != ".metadata.creationTimestamp" {
		t.Errorf("columns %+v", k.Columns)
	}
	if k.Status != defaultStatus || k.SpecRequired {
		t.Errorf("status %q, spec required %v", k.Status, k.SpecRequired)
	}
}

func TestKeyValues(t *testing.T) {
	got, err := keyValues(`categories=a,b,shortNames=x,plural=ys`)
	if err != nil {
		t.Fatal(err)
	}
	if got["categories"] != "a,b" || got["shortNames"] != "x" || got["plural"] != "ys" || len(got) != 3 {
		t.Errorf("keyValues = %v", got)
	}
	for _, bad := range []string{"a,b=c", "a=", "a=b=c", "a=b,=c"} {
		if _, err := keyValues(bad); err == nil {
			t.Errorf("keyValues(%q) accepted", bad)
		}
	}
}
