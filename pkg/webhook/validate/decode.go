package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/golang/protobuf/jsonpb" //nolint:staticcheck // Istio's own decoder: its Duration reads Go durations (3m, 500ms)
	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1beta1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DecodeSpec reads an Istio spec (JSON) into spec as Istio does: with the
// JSON decoder of the istio.io/api types (github.com/golang/protobuf's
// jsonpb), so that durations are Go durations ("3m", "500ms", "1h30m" as
// well as "10s"), enums are names or numbers, and fields go by their JSON
// or proto names. Unknown fields are refused, as the schema of Istio's CRDs
// refuses them (istiod's webhook alone would drop them). An empty or null
// spec leaves spec empty.
func DecodeSpec(raw []byte, spec proto.Message) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	u := jsonpb.Unmarshaler{}
	if err := u.Unmarshal(bytes.NewReader(raw), protoV1(spec)); err != nil {
		return errors.New(cleanDecodeError(err))
	}
	return nil
}

// protoV1 is spec as jsonpb takes it: every generated message of the
// istio.io/api module is one.
func protoV1(spec proto.Message) interface {
	Reset()
	String() string
	ProtoMessage()
} {
	return spec.(interface {
		Reset()
		String() string
		ProtoMessage()
	})
}

// cleanDecodeError drops the Go package names jsonpb puts in its messages
// ("unknown field "x" in v1alpha3.VirtualService").
func cleanDecodeError(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, " in v1alpha3."); i > 0 {
		msg = msg[:i]
	} else if i := strings.Index(msg, " in v1beta1."); i > 0 {
		msg = msg[:i]
	}
	msg = strings.NewReplacer("Go value of type []json.RawMessage", "a list",
		"Go value of type map[string]json.RawMessage", "an object").Replace(msg)
	return strings.Join(strings.Fields(msg), " ")
}

// topLevelFields refuses an object with fields besides apiVersion, kind,
// metadata, spec and status, as istiod's webhook does.
func topLevelFields(raw []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	for name := range fields {
		switch name {
		case "apiVersion", "kind", "metadata", "spec", "status":
		default:
			return fmt.Errorf("unknown field %q", name)
		}
	}
	return nil
}

// Annotations istiod's webhook refuses, or allows only on some kinds.
const (
	annotationDryRun          = "istio.io/dry-run"
	annotationAlwaysReject    = "internal.istio.io/webhook-always-reject"
	annotationParentNamespace = "internal.istio.io/parent-namespace"
	annotationParentNames     = "internal.istio.io/parents"
)

// checkMetadata applies Istio's rules for metadata: what the API server
// checks of a name and namespace before any webhook sees the object (file
// mode has no API server), and the annotations istiod's webhook refuses.
func checkMetadata(gk schema.GroupKind, m *meta, spec proto.Message, p *problems) {
	switch {
	case m.Name == "" && m.GenerateName == "":
		p.add("metadata.name", "a name is required")
	case m.Name != "":
		if errs := dns1123Subdomain(m.Name); errs != "" {
			p.add("metadata.name", "%q: %s", m.Name, errs)
		}
	}
	if m.Namespace != "" && !isDNS1123Label(m.Namespace) {
		p.add("metadata.namespace", "%q is not a DNS-1123 label", m.Namespace)
	}
	for _, a := range []string{annotationAlwaysReject, annotationParentNamespace, annotationParentNames} {
		if _, ok := m.Annotations[a]; ok {
			p.add("metadata.annotations", "%q may not be set by users", a)
		}
	}
	val, ok := m.Annotations[annotationDryRun]
	if !ok {
		return
	}
	ap, isAuthz := spec.(*security.AuthorizationPolicy)
	switch {
	case !isAuthz:
		p.add("metadata.annotations", "%s is only supported on AuthorizationPolicy, not %s", annotationDryRun, gk.Kind)
	case ap.Action != security.AuthorizationPolicy_ALLOW && ap.Action != security.AuthorizationPolicy_DENY:
		p.add("metadata.annotations", "%s only supports action ALLOW or DENY, not %s", annotationDryRun, ap.Action)
	default:
		if _, err := strconv.ParseBool(val); err != nil {
			p.add("metadata.annotations", "%s: %q is not a boolean", annotationDryRun, val)
		}
	}
}
