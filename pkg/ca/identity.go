package ca

import (
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Identity is a workload's service account: the subject of a certificate.
type Identity struct {
	TrustDomain    string
	Namespace      string
	ServiceAccount string
}

// SPIFFEID is the identity's URI: spiffe://<trust-domain>/ns/<ns>/sa/<sa>.
func (id Identity) SPIFFEID() string {
	return "spiffe://" + id.TrustDomain + "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount
}

// String is the identity in logs: the SPIFFE ID.
func (id Identity) String() string { return id.SPIFFEID() }

// key names the service account without the trust domain, as in the
// impersonators flag ("<ns>/<sa>").
func (id Identity) key() string { return id.Namespace + "/" + id.ServiceAccount }

// ParseSPIFFEID parses spiffe://<trust-domain>/ns/<ns>/sa/<sa>.
func ParseSPIFFEID(s string) (Identity, error) {
	u, err := url.Parse(s)
	if err != nil {
		// url's error quotes the input, which comes from a caller.
		return Identity{}, fmt.Errorf("parse SPIFFE ID: %s", clip(err.Error()))
	}
	return identityFromURI(u)
}

func identityFromURI(u *url.URL) (Identity, error) {
	if u.Scheme != "spiffe" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return Identity{}, fmt.Errorf("%q is not a SPIFFE ID", clip(u.String()))
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 4 || parts[0] != "ns" || parts[2] != "sa" || parts[1] == "" || parts[3] == "" {
		return Identity{}, fmt.Errorf("SPIFFE ID %q is not of the form spiffe://<trust-domain>/ns/<ns>/sa/<sa>", clip(u.String()))
	}
	if errs := validation.IsDNS1123Label(parts[1]); len(errs) > 0 {
		return Identity{}, fmt.Errorf("SPIFFE ID %q: namespace: %s", clip(u.String()), clip(strings.Join(errs, "; ")))
	}
	if errs := validation.IsDNS1123Subdomain(parts[3]); len(errs) > 0 {
		return Identity{}, fmt.Errorf("SPIFFE ID %q: service account: %s", clip(u.String()), clip(strings.Join(errs, "; ")))
	}
	return Identity{TrustDomain: u.Host, Namespace: parts[1], ServiceAccount: parts[3]}, nil
}

// identityFromUsername maps a Kubernetes service-account user name
// (system:serviceaccount:<ns>:<sa>) to an identity in trustDomain.
func identityFromUsername(name, trustDomain string) (Identity, error) {
	const prefix = "system:serviceaccount:"
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return Identity{}, fmt.Errorf("user %q is not a service account", clip(name))
	}
	ns, sa, ok := strings.Cut(rest, ":")
	if !ok || ns == "" || sa == "" || strings.Contains(sa, ":") {
		return Identity{}, fmt.Errorf("user %q is not a service account", clip(name))
	}
	return Identity{TrustDomain: trustDomain, Namespace: ns, ServiceAccount: sa}, nil
}
