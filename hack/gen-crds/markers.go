package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Validation markers, read from the leading comment of a field (applied to
// the field's schema) or of a message (applied to the message's object
// schema), one per line, in order, as Istio's generator applies them:
//
//	+kubebuilder:validation:<Marker>=<value>      the kubebuilder marker (MaxItems, MinLength, Pattern, ...)
//	+kubebuilder:validation:XValidation:message="...",rule="..."   a CEL rule, preprocessed (preprocessCEL)
//	+listType=map, +listMapKey=name               list topology
//	+protoc-gen-crd:map-value-validation:<Marker>  the marker, on the values of a map
//	+protoc-gen-crd:list-value-validation:<Marker> the marker, on the items of a list
//	+protoc-gen-crd:duration-validation:none      drops the rules of the schema (the default
//	                                              Duration rule) and ends the field's markers
//	+protoc-gen-crd:validation:XIntOrString       an int-or-string: anyOf integer, string
//	+protoc-gen-crd:validation:IgnoreSubValidation:["message", ...]  drops the CEL rules with
//	                                              these messages from the schema and below
//	+kubebuilder:altName=<name>                   (read by the schema builder: a second property)
//
// An unknown marker under these prefixes is an error, as it is for Istio's
// generator, so that a new annotation in istio.io/api cannot be skipped
// unnoticed.
const (
	kubebuilderValidation = "+kubebuilder:validation:"
	protocGenCRD          = "+protoc-gen-crd:"
	mapValueValidation    = "+protoc-gen-crd:map-value-validation:"
	listValueValidation   = "+protoc-gen-crd:list-value-validation:"
	durationNone          = "+protoc-gen-crd:duration-validation:none"
	intOrStringMarker     = "+protoc-gen-crd:validation:XIntOrString"
	ignoreSubValidation   = "+protoc-gen-crd:validation:IgnoreSubValidation:"
	xValidationMarker     = "+kubebuilder:validation:XValidation:"
)

// applyMarkers applies the validation markers of comment to s.
func applyMarkers(s *apiextv1.JSONSchemaProps, comment string) error {
	for _, line := range strings.Split(comment, "\n") {
		line = strings.TrimSpace(line)
		if !strings.Contains(line, kubebuilderValidation) && !strings.Contains(line, "+list") && !strings.Contains(line, protocGenCRD) {
			continue
		}
		target := s
		if strings.Contains(line, mapValueValidation) {
			if target.AdditionalProperties == nil || target.AdditionalProperties.Schema == nil {
				return fmt.Errorf("%s on a field that is not a map", line)
			}
			target = target.AdditionalProperties.Schema
			line = strings.ReplaceAll(line, mapValueValidation, kubebuilderValidation)
		}
		if strings.Contains(line, listValueValidation) {
			if target.Items == nil || target.Items.Schema == nil {
				return fmt.Errorf("%s on a field that is not a list", line)
			}
			target = target.Items.Schema
			line = strings.ReplaceAll(line, listValueValidation, kubebuilderValidation)
		}
		if strings.Contains(line, durationNone) {
			target.XValidations = nil
			return nil
		}
		if strings.Contains(line, intOrStringMarker) {
			target.Format, target.Type = "", ""
			target.AnyOf = []apiextv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}
			line = strings.ReplaceAll(line, protocGenCRD+"validation:", kubebuilderValidation)
		}
		if strings.Contains(line, ignoreSubValidation) {
			var messages []string
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, ignoreSubValidation)), &messages); err != nil {
				return fmt.Errorf("%s: %w", line, err)
			}
			stripRules(target, messages)
			continue
		}
		if err := applyMarker(target, line); err != nil {
			return fmt.Errorf("%s: %w", line, err)
		}
	}
	return nil
}

// applyMarker applies one +kubebuilder:validation:<Name>=<value>,
// +listType=... or +listMapKey=... marker.
func applyMarker(s *apiextv1.JSONSchemaProps, line string) error {
	if strings.HasPrefix(line, xValidationMarker) {
		rule, err := parseXValidation(strings.TrimPrefix(line, xValidationMarker))
		if err != nil {
			return err
		}
		s.XValidations = append(s.XValidations, rule)
		return nil
	}
	name, value, _ := strings.Cut(line, "=")
	if name == "+listType" || name == "+listMapKey" {
		return applyListMarker(s, name, value)
	}
	name, ok := strings.CutPrefix(name, kubebuilderValidation)
	if !ok {
		return fmt.Errorf("unknown marker")
	}
	switch name {
	case "MaxItems", "MinItems":
		return setInt(s, "array", value, map[string]**int64{"MaxItems": &s.MaxItems, "MinItems": &s.MinItems}[name])
	case "MaxLength", "MinLength":
		return setInt(s, "string", value, map[string]**int64{"MaxLength": &s.MaxLength, "MinLength": &s.MinLength}[name])
	case "MaxProperties", "MinProperties":
		return setInt(s, "object", value, map[string]**int64{"MaxProperties": &s.MaxProperties, "MinProperties": &s.MinProperties}[name])
	case "Maximum", "Minimum":
		if s.Type != "integer" && s.Type != "number" {
			return fmt.Errorf("%s on a %q, not a number", name, s.Type)
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return err
		}
		if name == "Maximum" {
			s.Maximum = &v
		} else {
			s.Minimum = &v
		}
		return nil
	case "Pattern":
		if s.Type != "string" && !s.XIntOrString {
			return fmt.Errorf("Pattern on a %q, not a string", s.Type)
		}
		p, err := markerString(value)
		if err != nil {
			return err
		}
		s.Pattern = p
		return nil
	case "XIntOrString":
		s.XIntOrString = true
		return nil
	}
	return fmt.Errorf("unknown marker %q", name)
}

// applyListMarker applies +listType=atomic|set|map or +listMapKey=field.
func applyListMarker(s *apiextv1.JSONSchemaProps, name, value string) error {
	if name == "+listMapKey" {
		if s.Type != "array" || s.XListType == nil || *s.XListType != "map" {
			return fmt.Errorf("listMapKey on something that is not a listType=map array")
		}
		s.XListMapKeys = append(s.XListMapKeys, value)
		return nil
	}
	if s.Type != "array" {
		return fmt.Errorf("listType on a %q, not an array", s.Type)
	}
	switch value {
	case "atomic", "set", "map":
	default:
		return fmt.Errorf("unknown listType %q", value)
	}
	s.XListType = &value
	return nil
}

func setInt(s *apiextv1.JSONSchemaProps, typ, value string, field **int64) error {
	if s.Type != typ {
		return fmt.Errorf("marker for a %s on a %q", typ, s.Type)
	}
	v, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return err
	}
	*field = &v
	return nil
}

// markerString is a marker's string value: quoted ("..." or `...`) or,
// bare, everything up to the end of the line (without a comma, which
// would start another argument).
func markerString(v string) (string, error) {
	if strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "`") {
		return strconv.Unquote(v)
	}
	if strings.Contains(v, ",") {
		return "", fmt.Errorf("bare value %q holds a comma: quote it", v)
	}
	return v, nil
}

// parseXValidation reads `message="...",rule="..."`. As in Istio's
// generator the rule is everything after ",rule=" less its first and last
// characters (the quotes), taken as written, so that it may contain
// unescaped double quotes; the message is a quoted string. The rule is
// then preprocessed (preprocessCEL).
func parseXValidation(args string) (apiextv1.ValidationRule, error) {
	left, right, ok := strings.Cut(args, ",rule=")
	if !ok || len(right) < 2 {
		return apiextv1.ValidationRule{}, fmt.Errorf("want message=\"...\",rule=\"...\"")
	}
	msg, ok := strings.CutPrefix(left, "message=")
	if !ok {
		return apiextv1.ValidationRule{}, fmt.Errorf("want message=\"...\" first, have %q", left)
	}
	message, err := strconv.Unquote(msg)
	if err != nil {
		return apiextv1.ValidationRule{}, fmt.Errorf("message %s: %w", msg, err)
	}
	rule, err := preprocessCEL(right[1 : len(right)-1])
	if err != nil {
		return apiextv1.ValidationRule{}, err
	}
	return apiextv1.ValidationRule{Rule: rule, Message: message}, nil
}

// stripRules removes the CEL rules whose message is one of messages from s
// and every schema below it.
func stripRules(s *apiextv1.JSONSchemaProps, messages []string) {
	if s == nil {
		return
	}
	if s.XValidations != nil {
		kept := s.XValidations[:0]
		for _, r := range s.XValidations {
			drop := false
			for _, m := range messages {
				drop = drop || r.Message == m
			}
			if !drop {
				kept = append(kept, r)
			}
		}
		s.XValidations = kept
	}
	for k, p := range s.Properties {
		stripRules(&p, messages)
		s.Properties[k] = p
	}
	if s.Items != nil {
		stripRules(s.Items.Schema, messages)
	}
	if s.AdditionalProperties != nil {
		stripRules(s.AdditionalProperties.Schema, messages)
	}
}
