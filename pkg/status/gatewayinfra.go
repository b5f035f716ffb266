package status

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gw "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// GatewayInfra is what the automated deployment (pkg/gatewaydeploy) knows
// of a Gateway's infrastructure, which the translation cannot: whether its
// Deployment has an available replica and what addresses its Service has.
type GatewayInfra struct {
	// Addresses for status.addresses; none leaves what is there.
	Addresses []gw.GatewayStatusAddress
	// Programmed replaces the translation's Programmed condition (its
	// type, status, reason and message; the generation is the Report's).
	Programmed metav1.Condition
}

// GatewayInfraSource says what it knows of the infrastructure of the
// Gateways it deploys.
type GatewayInfraSource interface {
	// GatewayInfra returns what is known of namespace/name's
	// infrastructure; false when the Gateway is not deployed by it.
	GatewayInfra(namespace, name string) (GatewayInfra, bool)
	// Synced reports whether GatewayInfra says all there is to know (it
	// has looked at every Gateway). Until then no Gateway's status is
	// written.
	Synced() bool
}

// SetGatewayInfra makes the status written for the Gateways src deploys
// carry their addresses and their Programmed condition from src: one
// writer of Gateway status, with the translation's conditions and the
// deployment's facts. Call before Start; tell the Auditor of changes with
// GatewayInfraChanged.
func (a *Auditor) SetGatewayInfra(src GatewayInfraSource) { a.infra = src }

// GatewayInfraChanged asks for the status of the Gateway namespace/name to
// be brought in step again. It never blocks.
func (a *Auditor) GatewayInfraChanged(namespace, name string) {
	a.mu.Lock()
	a.pending[model.Key{Kind: model.KindKubernetesGateway, Namespace: namespace, Name: name}] = true
	a.mu.Unlock()
	a.signal()
}

// gatewayReport is the World's Report of key with what the infrastructure
// source knows laid over it: a copy, the World's is not changed. Only a
// Gateway the translation reports on (of Istio's controller) gets it.
func (a *Auditor) gatewayReport(w *model.World, key model.Key) *gatewayapi.Report {
	rep := w.GatewayAPIReport(key)
	if rep == nil || a.infra == nil || key.Kind != model.KindKubernetesGateway || len(rep.Conditions) == 0 {
		return rep
	}
	if !a.infra.Synced() {
		return nil // nothing to write yet; GatewayInfraChanged follows
	}
	inf, ok := a.infra.GatewayInfra(key.Namespace, key.Name)
	if !ok {
		return rep
	}
	return withInfra(rep, inf)
}

// withInfra is a copy of rep with inf's addresses and Programmed
// condition (at rep's generation).
func withInfra(rep *gatewayapi.Report, inf GatewayInfra) *gatewayapi.Report {
	out := *rep
	out.Conditions = slices.Clone(rep.Conditions)
	for i, c := range out.Conditions {
		if c.Type == string(gw.GatewayConditionProgrammed) {
			p := inf.Programmed
			p.Type, p.ObservedGeneration, p.LastTransitionTime = c.Type, c.ObservedGeneration, c.LastTransitionTime
			out.Conditions[i] = p
		}
	}
	out.Addresses = inf.Addresses
	return &out
}
