package validate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"

	"github.com/meshplane/discovery/pkg/model"
)

// gatewayAPIGroup is the Kubernetes Gateway API's group.
const gatewayAPIGroup = model.GroupGatewayAPI

// checkGatewayAPI judges an object of the Kubernetes Gateway API. It is
// decoded strictly into sigs.k8s.io/gateway-api's type (unknown and
// duplicate fields refused) but not validated further: the Gateway API's
// CRDs carry their own schema and CEL rules, which the API server applies,
// and what discovery does not translate is reported on the object by the
// translation (pkg/model/gatewayapi). Kinds discovery does not read
// (TCPRoute, TLSRoute, ...) are accepted with an Unsupported warning.
func checkGatewayAPI(gk schema.GroupKind, raw []byte, name string) (Warnings, error) {
	kind, err := model.KindFor(gk.WithVersion("v1"))
	if err != nil {
		return Warnings{Unsupported: []string{fmt.Sprintf("discovery does not read %s: it is stored but has no effect", gk)}}, nil
	}
	obj, err := model.Scheme().New(kind.GroupVersionKind())
	if err != nil {
		return Warnings{}, &DecodeError{fmt.Errorf("%s %q: %w", gk.Kind, name, err)}
	}
	strict, err := sigsjson.UnmarshalStrict(raw, obj)
	if err == nil && len(strict) > 0 {
		err = strict[0]
	}
	if err != nil {
		return Warnings{}, &DecodeError{fmt.Errorf("%s %q: %w", gk.Kind, name, err)}
	}
	return Warnings{Unsupported: []string{fmt.Sprintf(
		"discovery reads %s but does not validate it: the Gateway API CRD's schema and rules do; what discovery does not translate is reported on the object", gk.Kind)}}, nil
}
