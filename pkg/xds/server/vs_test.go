package server

import (
	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// vsEdit is a VirtualService splitting host's traffic between two
// DestinationRule-less subsets by weight w.
func vsEdit(ns, host, rv string, w int32) model.Event {
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: host, ResourceVersion: rv}}
	vs.Spec.Hosts = []string{host}
	vs.Spec.Http = []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{
		{Destination: &networking.Destination{Host: host, Port: &networking.PortSelector{Number: 80}}, Weight: w},
		{Destination: &networking.Destination{Host: host, Port: &networking.PortSelector{Number: 7070}}, Weight: 100 - w},
	}}}
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindVirtualService, Namespace: ns, Name: host}, Object: vs}
}
