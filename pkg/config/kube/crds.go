package kube

import (
	authorizationv1 "k8s.io/api/authorization/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshplane/discovery/pkg/model"
)

// Why a CRD informer rather than polling discovery: the informer learns of
// a CRD within one watch event, not one poll period later; it sees the
// Established condition and the served versions, which discovery shows
// only indirectly; it reports deletions (and relists after an outage) with
// the same machinery as every other kind; and one watch costs the API
// server less than a discovery poll every few seconds. The price is that
// discovery must be allowed to list and watch
// customresourcedefinitions.apiextensions.k8s.io, as istiod is.

// crdKindLabel labels the CRD informer in logs and metrics.
const crdKindLabel = "CustomResourceDefinition"

// CRDName is the name of the CustomResourceDefinition that defines kind,
// as <plural>.<group>.
func CRDName(kind model.Kind) string {
	gvr := kind.GroupVersionResource()
	return gvr.Resource + "." + gvr.Group
}

// crdKinds maps CRD names to the kinds they define: Istio's, and the
// Gateway API's when there is a client for it.
func crdKinds(gatewayAPI bool) map[string]model.Kind {
	m := make(map[string]model.Kind, len(model.CRDKinds))
	for _, k := range model.CRDKinds {
		if k.IsGatewayAPI() && !gatewayAPI {
			continue
		}
		m[CRDName(k)] = k
	}
	return m
}

// crdServes reports whether crd lets kind be watched: it is not being
// deleted, is Established, and serves the version discovery reads. If not,
// reason says why.
func crdServes(crd *apiextv1.CustomResourceDefinition, kind model.Kind) (ok bool, reason string) {
	if crd.DeletionTimestamp != nil {
		return false, "being deleted"
	}
	established := false
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
			established = true
		}
	}
	if !established {
		return false, "not established"
	}
	gvr := kind.GroupVersionResource()
	if crd.Spec.Group != gvr.Group || crd.Spec.Names.Plural != gvr.Resource {
		return false, "defines another resource"
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == gvr.Version && v.Served {
			return true, ""
		}
	}
	return false, "does not serve " + gvr.Version
}

func (s *Source) newCRDInformer() (cache.SharedIndexInformer, cache.ResourceEventHandlerRegistration, error) {
	inf := apiextinformers.NewCustomResourceDefinitionInformer(s.clients.CRDs, s.opts.ResyncPeriod, cache.Indexers{})
	interesting := func(name string) bool { _, ok := s.crdKinds[name]; return ok }
	if err := inf.SetTransform(stripCRD(interesting)); err != nil {
		return nil, nil, err
	}
	log := s.log.With("kind", crdKindLabel)
	if err := inf.SetWatchErrorHandlerWithContext(watchErrorHandler(log, s.metrics, crdKindLabel)); err != nil {
		return nil, nil, err
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.onCRD,
		UpdateFunc: func(_, obj any) { s.onCRD(obj) },
		DeleteFunc: s.onCRDDelete,
	})
	if err != nil {
		return nil, nil, err
	}
	return inf, reg, nil
}

func (s *Source) onCRD(obj any) {
	crd, ok := obj.(*apiextv1.CustomResourceDefinition)
	if !ok {
		return
	}
	kind, ok := s.crdKinds[crd.Name]
	if !ok {
		return
	}
	serves, reason := crdServes(crd, kind)
	s.setWatched(kind, crd.Name, serves, reason)
}

func (s *Source) onCRDDelete(obj any) {
	name := ""
	switch o := obj.(type) {
	case *apiextv1.CustomResourceDefinition:
		name = o.Name
	case cache.DeletedFinalStateUnknown:
		name = o.Key // cluster-scoped: the key is the name
	}
	if kind, ok := s.crdKinds[name]; ok {
		s.setWatched(kind, name, false, "deleted")
	}
}

// optionalKinds are the Istio kinds whose RBAC an older chart does not
// grant: their watch starts only when the API server says it may
// (SelfSubjectAccessReview), so that a missing rule leaves the kind unread
// instead of keeping the source from ever syncing.
var optionalKinds = map[model.Kind]bool{
	// The Gateway API's CRDs are the user's, and so may be the RBAC
	// rules that let discovery read them.
	model.KindGatewayClass:      true,
	model.KindKubernetesGateway: true,
	model.KindHTTPRoute:         true,
	model.KindGRPCRoute:         true,
	model.KindTCPRoute:          true,
	model.KindTLSRoute:          true,
	model.KindReferenceGrant:    true,
	model.KindTelemetry:         true,
	model.KindEnvoyFilter:       true,
	model.KindWorkloadGroup:     true,
	model.KindProxyConfig:       true,
	model.KindWasmPlugin:        true,
	model.KindTrafficExtension:  true,
}

// mayWatch asks whether the source may list and watch kind in every
// namespace.
func (s *Source) mayWatch(kind model.Kind) bool {
	gvr := kind.GroupVersionResource()
	for _, verb := range []string{"list", "watch"} {
		r, err := s.clients.Kube.AuthorizationV1().SelfSubjectAccessReviews().Create(s.ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: gvr.Group, Resource: gvr.Resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil || !r.Status.Allowed {
			return false
		}
	}
	return true
}

// setWatched starts or stops the watcher of an Istio kind as its CRD
// comes and goes.
func (s *Source) setWatched(kind model.Kind, crd string, want bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watchers[kind]
	switch {
	case want && w == nil:
		if s.ctx.Err() != nil {
			return
		}
		if optionalKinds[kind] && !s.mayWatch(kind) {
			s.log.Warn("CRD found, but this service account may not list and watch its objects everywhere: the kind is not read (grant get, list, watch on it to read it)",
				"crd", crd, "kind", string(kind))
			return
		}
		s.log.Info("CRD found", "crd", crd, "kind", string(kind))
		nw, err := newWatcher(s, kind)
		if err != nil {
			s.log.Error("cannot watch kind", "kind", string(kind), "err", err)
			return
		}
		s.watchers[kind] = nw
		nw.start(s.ctx, &s.wg)
	case !want && w != nil:
		delete(s.watchers, kind)
		n := w.stop()
		s.log.Info("CRD gone; stopped watching its kind and removed its objects",
			"crd", crd, "kind", string(kind), "reason", reason, "removed", n)
	case !want:
		s.log.Debug("CRD not usable yet", "crd", crd, "kind", string(kind), "reason", reason)
	}
}
