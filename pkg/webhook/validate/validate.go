package validate

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Groups of the kinds /validate checks.
const (
	GroupNetworking = "networking.istio.io"
	GroupSecurity   = "security.istio.io"
)

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
	check   func(spec proto.Message, p *problems)
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
}

// object is the part of a custom resource that validation reads.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name              string `json:"name"`
		Namespace         string `json:"namespace"`
		DeletionTimestamp string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

// Validate checks one object (its JSON, as the API server sends it) of
// kind gk. It returns warnings for fields discovery does not act on yet,
// and a *DecodeError if the object cannot be read as that kind, or an
// *InvalidError listing every problem found. Kinds of Istio's groups that
// discovery does not read are accepted with a warning.
func Validate(gk schema.GroupKind, raw []byte) ([]string, error) {
	var obj object
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, &DecodeError{fmt.Errorf("%s is not a Kubernetes object: %w", gk.Kind, err)}
	}
	if obj.Metadata.DeletionTimestamp != "" {
		// An object on its way out (say, a finalizer being removed) is
		// not judged again: refusing would keep it forever.
		return nil, nil
	}
	k, ok := kinds[gk]
	if !ok {
		return []string{fmt.Sprintf("discovery does not read %s: it is stored but has no effect", gk)}, nil
	}
	spec := k.newSpec()
	if len(obj.Spec) > 0 && string(obj.Spec) != "null" {
		if err := protojson.Unmarshal(obj.Spec, spec); err != nil {
			return nil, &DecodeError{fmt.Errorf("%s %q: spec: %s", gk.Kind, obj.Metadata.Name, cleanProtoError(err))}
		}
	}
	p := &problems{}
	k.check(spec, p)
	warnings := unsupported(gk.Kind, spec)
	if len(p.list) > 0 {
		return warnings, &InvalidError{Kind: gk.Kind, Name: obj.Metadata.Name, Problems: p.list}
	}
	return warnings, nil
}

// cleanProtoError drops protojson's deliberately unstable spacing.
func cleanProtoError(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\u00a0", " ")), " ")
}

// problems collects what is wrong, with field paths.
type problems struct{ list []string }

func (p *problems) add(path, format string, args ...any) {
	p.list = append(p.list, path+": "+fmt.Sprintf(format, args...))
}

func at(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// checkHost checks a host name as Istio accepts it: a DNS name, optionally
// with a leading "*." wildcard, or "*", or an IP address.
func checkHost(p *problems, path, host string) {
	switch {
	case host == "":
		p.add(path, "host must not be empty")
	case host == "*", net.ParseIP(host) != nil:
	case strings.HasPrefix(host, "*."):
		checkDNSName(p, path, host[2:])
	default:
		checkDNSName(p, path, host)
	}
}

func checkDNSName(p *problems, path, name string) {
	if errs := validation.IsDNS1123Subdomain(strings.ToLower(name)); len(errs) > 0 {
		p.add(path, "%q is not a valid host name: %s", name, strings.Join(errs, ", "))
	}
}

// checkNamespacedHost checks "namespace/host" as Gateway and Sidecar use it.
func checkNamespacedHost(p *problems, path, h string) {
	ns, host, ok := strings.Cut(h, "/")
	if !ok {
		p.add(path, "%q must be namespace/host (namespace may be * or .)", h)
		return
	}
	if ns != "*" && ns != "." && ns != "~" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			p.add(path, "namespace %q: %s", ns, strings.Join(errs, ", "))
		}
	}
	checkHost(p, path, host)
}

func checkPort(p *problems, path string, port uint32) {
	if port < 1 || port > 65535 {
		p.add(path, "port %d is not in 1-65535", port)
	}
}

func checkPercent(p *problems, path string, v float64) {
	if v < 0 || v > 100 {
		p.add(path, "percentage %v is not in 0-100", v)
	}
}
