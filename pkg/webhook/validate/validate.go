package validate

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	telemetry "istio.io/api/telemetry/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Groups of the kinds /validate checks.
const (
	GroupNetworking = "networking.istio.io"
	GroupSecurity   = "security.istio.io"
	GroupTelemetry  = "telemetry.istio.io"
	GroupExtensions = "extensions.istio.io"
)

// istioGroups are the groups /validate takes.
var istioGroups = map[string]bool{GroupNetworking: true, GroupSecurity: true, GroupTelemetry: true, GroupExtensions: true}

// InvalidError lists what is wrong with an object, each problem prefixed
// by its field path.
type InvalidError struct {
	Kind     string
	Name     string
	Problems []string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("%s %q is invalid: %s", e.Kind, e.Name, strings.Join(e.Problems, "; "))
}

// DecodeError says that an object could not be read as its kind.
type DecodeError struct{ Err error }

func (e *DecodeError) Error() string { return e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// kind pairs a proto message with its checks.
type kind struct {
	newSpec func() proto.Message
	check   func(spec proto.Message, m *meta, p *problems)
}

// meta is the part of an object's metadata that Istio's checks read.
type meta struct {
	Name              string            `json:"name"`
	GenerateName      string            `json:"generateName"`
	Namespace         string            `json:"namespace"`
	Labels            map[string]string `json:"labels"`
	Annotations       map[string]string `json:"annotations"`
	DeletionTimestamp string            `json:"deletionTimestamp"`
}

var kinds = map[schema.GroupKind]kind{
	{Group: GroupNetworking, Kind: "VirtualService"}:      {func() proto.Message { return &networking.VirtualService{} }, checkVirtualService},
	{Group: GroupNetworking, Kind: "DestinationRule"}:     {func() proto.Message { return &networking.DestinationRule{} }, checkDestinationRule},
	{Group: GroupNetworking, Kind: "Gateway"}:             {func() proto.Message { return &networking.Gateway{} }, checkGateway},
	{Group: GroupNetworking, Kind: "ServiceEntry"}:        {func() proto.Message { return &networking.ServiceEntry{} }, checkServiceEntry},
	{Group: GroupNetworking, Kind: "Sidecar"}:             {func() proto.Message { return &networking.Sidecar{} }, checkSidecar},
	{Group: GroupNetworking, Kind: "WorkloadEntry"}:       {func() proto.Message { return &networking.WorkloadEntry{} }, checkWorkloadEntry},
	{Group: GroupSecurity, Kind: "AuthorizationPolicy"}:   {func() proto.Message { return &security.AuthorizationPolicy{} }, checkAuthorizationPolicy},
	{Group: GroupSecurity, Kind: "PeerAuthentication"}:    {func() proto.Message { return &security.PeerAuthentication{} }, checkPeerAuthentication},
	{Group: GroupSecurity, Kind: "RequestAuthentication"}: {func() proto.Message { return &security.RequestAuthentication{} }, checkRequestAuthentication},
	{Group: GroupTelemetry, Kind: "Telemetry"}:            {func() proto.Message { return &telemetry.Telemetry{} }, checkTelemetry},
	{Group: GroupNetworking, Kind: "EnvoyFilter"}:         {func() proto.Message { return &networking.EnvoyFilter{} }, checkEnvoyFilter},
	{Group: GroupNetworking, Kind: "WorkloadGroup"}:       {func() proto.Message { return &networking.WorkloadGroup{} }, checkWorkloadGroup},
	{Group: GroupNetworking, Kind: "ProxyConfig"}:         {func() proto.Message { return &networkingv1beta1.ProxyConfig{} }, checkProxyConfig},
	{Group: GroupExtensions, Kind: "WasmPlugin"}:          {func() proto.Message { return &extensions.WasmPlugin{} }, checkWasmPlugin},
	{Group: GroupExtensions, Kind: "TrafficExtension"}:    {func() proto.Message { return &extensions.TrafficExtension{} }, checkTrafficExtension},
}

// namespace is the object's namespace, "default" when it has none (as the
// API server and file mode give it).
func (m *meta) namespace() string {
	if m.Namespace == "" {
		return "default"
	}
	return m.Namespace
}

// object is the part of a custom resource that validation reads.
type object struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   meta            `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
}

// Warnings are what Check has to say of an object it accepts (or refuses).
type Warnings struct {
	// Istio are the warnings Istio's own validation gives for the object.
	Istio []string
	// Unsupported name what discovery accepts but does not act on: fields
	// the generator ignores, or a kind it does not read.
	Unsupported []string
}

// All is every warning, Istio's first, as /validate returns them.
func (w Warnings) All() []string {
	if len(w.Istio)+len(w.Unsupported) == 0 {
		return nil
	}
	return append(append([]string{}, w.Istio...), w.Unsupported...)
}

// Validate checks one object (its JSON, as the API server sends it) of
// kind gk, as Check does, and returns all its warnings together.
func Validate(gk schema.GroupKind, raw []byte) ([]string, error) {
	w, err := Check(gk, raw)
	return w.All(), err
}

// Check checks one object (its JSON, as the API server sends it) of kind
// gk, and gives the same verdict as Istio (accept, warn or refuse), or
// refuses what Envoy would refuse. It returns a *DecodeError if the object
// cannot be read as that kind, or an *InvalidError listing every problem
// found. Kinds of Istio's groups that discovery does not read are accepted
// with an Unsupported warning. The webhook and the file source both judge
// objects with it.
func Check(gk schema.GroupKind, raw []byte) (Warnings, error) {
	var obj object
	if err := json.Unmarshal(raw, &obj); err != nil {
		return Warnings{}, &DecodeError{fmt.Errorf("%s is not a Kubernetes object: %w", gk.Kind, err)}
	}
	if err := topLevelFields(raw); err != nil {
		return Warnings{}, &DecodeError{fmt.Errorf("%s %q: %w", gk.Kind, obj.Metadata.Name, err)}
	}
	if obj.Metadata.DeletionTimestamp != "" {
		// An object on its way out (say, a finalizer being removed) is
		// not judged again: refusing would keep it forever.
		return Warnings{}, nil
	}
	if gk.Group == gatewayAPIGroup {
		return checkGatewayAPI(gk, raw, obj.Metadata.Name)
	}
	k, ok := kinds[gk]
	if !ok {
		return Warnings{Unsupported: []string{fmt.Sprintf("discovery does not read %s: it is stored but has no effect", gk)}}, nil
	}
	spec := k.newSpec()
	if err := DecodeSpec(obj.Spec, spec); err != nil {
		return Warnings{}, &DecodeError{fmt.Errorf("%s %q: spec: %w", gk.Kind, obj.Metadata.Name, err)}
	}
	p := &problems{}
	checkMetadata(gk, &obj.Metadata, spec, p)
	k.check(spec, &obj.Metadata, p)
	w := Warnings{Istio: p.warnings, Unsupported: unsupported(gk.Kind, spec)}
	if len(p.list) > 0 {
		return w, &InvalidError{Kind: gk.Kind, Name: obj.Metadata.Name, Problems: p.list}
	}
	return w, nil
}

// problems collects what is wrong, with field paths,
// and what Istio would only warn about.
type problems struct{ list, warnings []string }

func (p *problems) add(path, format string, args ...any) {
	p.list = append(p.list, path+": "+fmt.Sprintf(format, args...))
}

// errorsOnly runs check and keeps only its errors: Istio drops the
// warnings of some nested checks (subsets, port-level settings).
func (p *problems) errorsOnly(check func(*problems)) {
	q := &problems{}
	check(q)
	p.list = append(p.list, q.list...)
}

func (p *problems) warn(path, format string, args ...any) {
	p.warnings = append(p.warnings, path+": "+fmt.Sprintf(format, args...))
}

func at(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func checkPercent(p *problems, path string, v float64) {
	if v < 0 || v > 100 {
		p.add(path, "percentage %v is not in 0-100", v)
	}
}
