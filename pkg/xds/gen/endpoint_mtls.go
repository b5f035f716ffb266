package gen

import (
	security "istio.io/api/security/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// What clients read of PeerAuthentication. Auto mTLS on a client decides
// by the server's policies: a cluster of a namespace whose namespace (or
// mesh) mode is DISABLE gets no mTLS at all (namespaceMTLS), and an
// endpoint whose own workload policy disables mTLS on its port loses its
// tlsMode metadata, so the cluster's transport socket match sends it
// plaintext, as istiod's EDS mtlsChecker does. (istiod also skips that
// check when the cluster's DestinationRule sets TLS; here the metadata
// is left out regardless: a cluster with the rule's TLS has no socket
// matches, so the metadata is read by nothing.)

// paIndex holds a World's PeerAuthentications by namespace.
type paIndex struct {
	root string
	byNS map[string][]*model.Config
	// disables is set when some policy disables mTLS (its mode or a
	// port's): only then do clients' clusters and endpoints depend on
	// PeerAuthentication at all.
	disables bool
}

func newPAIndex(w *view) *paIndex {
	x := &paIndex{root: rootNamespace(w), byNS: map[string][]*model.Config{}}
	for _, c := range w.Configs(model.KindPeerAuthentication) {
		pa, ok := c.Object.(*securityv1.PeerAuthentication)
		if !ok {
			continue
		}
		x.byNS[c.Key.Namespace] = append(x.byNS[c.Key.Namespace], c)
		if pa.Spec.GetMtls().GetMode() == security.PeerAuthentication_MutualTLS_DISABLE {
			x.disables = true
		}
		for _, m := range pa.Spec.GetPortLevelMtls() {
			if m.GetMode() == security.PeerAuthentication_MutualTLS_DISABLE {
				x.disables = true
			}
		}
	}
	return x
}

// mtlsOff returns whether an endpoint of namespace ns serving port has
// mTLS disabled by its workload's policies, or nil when no policy
// disables mTLS anywhere.
func (x *paIndex) mtlsOff(ns string) func(ep *model.Endpoint, port int32) bool {
	if !x.disables {
		return nil
	}
	pas := append(append([]*model.Config(nil), x.byNS[x.root]...), x.byNS[ns]...)
	return func(ep *model.Endpoint, port int32) bool {
		return workloadMTLS(pas, x.root, ns, ep.Labels).forPort(port) == MTLSDisable
	}
}
