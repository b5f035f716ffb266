package gen

import (
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
)

// What generation reads of the MeshConfig (model.World.Mesh). Every
// resource that depends on it is rebuilt when it changes: a class's
// previous configuration is not reused across MeshConfigs (Class), nor are
// the clusters shared between classes (partCache), nor a proxy's own
// configuration (the push filter treats a MeshConfig change as touching
// every proxy, as istiod's full push on a mesh change does).

// RootNamespace is the mesh's root namespace (MeshConfig rootNamespace,
// istio-system by default): its Sidecar, PeerAuthentication,
// AuthorizationPolicy, DestinationRule and Telemetry resources without
// selector apply to every namespace.
func rootNamespace(w *view) string { return w.Mesh().RootNamespace() }

// connectTimeout is the MeshConfig's connectTimeout, every cluster's
// unless a DestinationRule sets one.
func connectTimeout(w *view) *durationpb.Duration {
	return durationpb.New(w.Mesh().ConnectTimeout())
}

func orDefault(exportTo, dflt []string) []string {
	if len(exportTo) == 0 {
		return dflt
	}
	return exportTo
}

// serviceExportTo is a Service's or ServiceEntry's exportTo, or the
// MeshConfig's defaultServiceExportTo when it sets none.
func serviceExportTo(w *view, s *model.Service) []string {
	return orDefault(s.ExportTo, w.Mesh().ServiceExportTo())
}

// vsExportTo is a VirtualService's exportTo, or the MeshConfig's
// defaultVirtualServiceExportTo.
func vsExportTo(w *view, vs *networking.VirtualService) []string {
	return orDefault(vs.GetExportTo(), w.Mesh().VirtualServiceExportTo())
}

// drExportTo is a DestinationRule's exportTo, or the MeshConfig's
// defaultDestinationRuleExportTo.
func drExportTo(w *view, dr *networking.DestinationRule) []string {
	return orDefault(dr.GetExportTo(), w.Mesh().DestinationRuleExportTo())
}

// ServiceExportedTo reports whether svc is visible to proxies of namespace
// ns (its exportTo, or the mesh's default).
func serviceExportedTo(w *view, svc *model.Service, ns string) bool {
	return exportedTo(serviceExportTo(w, svc), svc.Namespace, ns)
}

// VirtualServiceExportedTo reports whether the VirtualService vs of
// namespace own is visible to proxies of namespace ns.
func virtualServiceExportedTo(w *view, vs *networking.VirtualService, own, ns string) bool {
	return exportedTo(vsExportTo(w, vs), own, ns)
}
