package gen

import (
	"google.golang.org/protobuf/proto"
	security "istio.io/api/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// authzUnsupportedValues reports action CUSTOM (external authorization):
// without an authorizer such a policy denies what its rules match
// (authz.go), so it must be reported like an unsupported field, not only by
// the webhook.
func authzUnsupportedValues(spec proto.Message) []string {
	ap, ok := spec.(*security.AuthorizationPolicy)
	if !ok || ap.GetAction() != security.AuthorizationPolicy_CUSTOM {
		return nil
	}
	return []string{"action"}
}

func init() { valueChecks[model.KindAuthorizationPolicy] = authzUnsupportedValues }
