package gen

import (
	"strings"

	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// What of an AuthorizationPolicy generation cannot express, and fails
// closed on (authz.go: an ALLOW rule that needs it is left out, a DENY
// rule is enforced without it), is reported like an unsupported field, so
// that the webhook warns, the Auditor writes it to the policy's status and
// discovery_xds_unsupported_fields_total counts it:
//
//	source serviceAccounts,             unsupported fields
//	trustDomains, ...
//	when keys Istio knows but           "rules[I].when[J].key=source.trustDomain"
//	discovery does not translate        (experimental.envoy.filters.* as such:
//	                                    the label of a metric must not take
//	                                    user input)
//
// requestPrincipals and request.auth.* are translated (authz_jwt.go);
// on proxyless gRPC servers, which validate no JWT, they fail closed and
// are logged per rule at generation. Action CUSTOM is served with the
// MeshConfig's envoyExtAuthzHttp and envoyExtAuthzGrpc providers
// (authz_custom.go); a provider it cannot use (missing, invalid, another
// kind) is a configuration error, as in istiod: the policy's rules deny,
// and it is logged. On proxyless gRPC servers (no ext_authz) CUSTOM
// rules deny and are logged per namespace.
//
// A key Istio does not know fails closed as well (and is logged), but is
// not reported here: validation refuses the policy as invalid, which is
// not a feature discovery lacks.

// authzUnsupportedValues reports the condition keys generation cannot
// translate.
func authzUnsupportedValues(spec proto.Message) []string {
	ap, ok := spec.(*security.AuthorizationPolicy)
	if !ok {
		return nil
	}
	var out []string
	for i, r := range ap.GetRules() {
		for j, c := range r.GetWhen() {
			if name, unsupported := unsupportedKey(c.GetKey()); unsupported && name != "" {
				out = append(out, "rules["+itoa(int32(i))+"].when["+itoa(int32(j))+"].key="+name)
			}
		}
	}
	return out
}

// unsupportedKey reports whether generation cannot translate the
// condition key, and how to name it: the key for one Istio defines (claim
// names replaced by [], experimental.envoy.filters.* as such), "" for a
// key Istio does not know.
func unsupportedKey(key string) (string, bool) {
	switch key {
	case "source.ip", "remote.ip", "source.namespace", "source.principal",
		"destination.port", "destination.ip", "connection.sni":
		return "", false
	case "request.auth.principal", "request.auth.audiences", "request.auth.presenter":
		return "", false
	case "source.serviceAccount", "source.trustDomain":
		return key, true
	}
	switch {
	case headerKey(key) != "", bracketed(key, "request.auth.claims"):
		return "", false
	case strings.HasPrefix(key, "experimental.envoy.filters."):
		return "experimental.envoy.filters.*", true
	}
	return "", true
}

// headerKey is the header name of a request.headers[NAME] key, lower
// case; "" for any other key.
func headerKey(key string) string {
	if !bracketed(key, "request.headers") {
		return ""
	}
	return strings.ToLower(key[len("request.headers[") : len(key)-1])
}

// bracketed reports whether key is attr[NAME] with a non-empty NAME.
func bracketed(key, attr string) bool {
	return len(key) > len(attr)+2 && strings.HasPrefix(key, attr+"[") && strings.HasSuffix(key, "]")
}

func init() { valueChecks[model.KindAuthorizationPolicy] = authzUnsupportedValues }
