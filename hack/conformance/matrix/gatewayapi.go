package matrix

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	gw "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshplane/discovery/hack/conformance/scenario"
	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// withGatewayAPI is in with the Istio Gateways and VirtualServices its
// Gateway API objects stand for, so that a gateway's probes cover the
// listeners and routes of Gateway API Gateways too. The translation used
// is discovery's (pkg/model/gatewayapi): it only chooses which requests
// to send, both control planes then answer each of them from the Gateway
// API objects themselves, so a listener or route discovery translates
// wrongly still shows as a difference. in itself is not changed; in
// without Gateway API objects is returned as it is.
func withGatewayAPI(in *scenario.Input) *scenario.Input {
	t := gatewayapi.Input{DomainSuffix: "cluster.local", Namespaces: map[string]map[string]string{}}
	svcs := map[[2]string]gatewayapi.Service{}
	haveGateway := false
	decode := func(o *scenario.Object, v any) bool {
		b, err := json.Marshal(o.Doc)
		return err == nil && json.Unmarshal(b, v) == nil
	}
	for _, o := range in.Objects {
		switch {
		case o.Kind == "Namespace":
			t.Namespaces[o.Name] = o.Labels()
		case o.Kind == "Service" && o.Group() == "":
			s := &corev1.Service{}
			if decode(o, s) {
				var ports []int32
				for _, p := range s.Spec.Ports {
					ports = append(ports, p.Port)
				}
				svcs[[2]string{o.Namespace, o.Name}] = gatewayapi.Service{Selector: s.Spec.Selector, Ports: ports}
			}
		case o.Group() != scenario.GatewayAPIGroup:
		case o.Kind == "GatewayClass":
			if v := (&gw.GatewayClass{}); decode(o, v) {
				t.Classes = append(t.Classes, v)
			}
		case o.Kind == "Gateway":
			if v := (&gw.Gateway{}); decode(o, v) {
				t.Gateways, haveGateway = append(t.Gateways, v), true
			}
		case o.Kind == "HTTPRoute":
			if v := (&gw.HTTPRoute{}); decode(o, v) {
				t.HTTPRoutes = append(t.HTTPRoutes, v)
			}
		case o.Kind == "GRPCRoute":
			if v := (&gw.GRPCRoute{}); decode(o, v) {
				t.GRPCRoutes = append(t.GRPCRoutes, v)
			}
		case o.Kind == "TCPRoute":
			if v := (&gw.TCPRoute{}); decode(o, v) {
				t.TCPRoutes = append(t.TCPRoutes, v)
			}
		case o.Kind == "TLSRoute":
			if v := (&gw.TLSRoute{}); decode(o, v) {
				t.TLSRoutes = append(t.TLSRoutes, v)
			}
		case o.Kind == "ReferenceGrant":
			if v := (&gw.ReferenceGrant{}); decode(o, v) {
				t.ReferenceGrants = append(t.ReferenceGrants, v)
			}
		}
	}
	if !haveGateway {
		return in
	}
	t.Service = func(ns, name string) (gatewayapi.Service, bool) {
		s, ok := svcs[[2]string{ns, name}]
		return s, ok
	}
	out := gatewayapi.Translate(t)
	next := *in
	next.Objects = append([]*scenario.Object(nil), in.Objects...)
	add := func(kind, ns, name string, v any) {
		b, err := json.Marshal(v)
		doc := map[string]any{}
		if err != nil || json.Unmarshal(b, &doc) != nil {
			return
		}
		doc["apiVersion"], doc["kind"] = "networking.istio.io/v1", kind
		next.Objects = append(next.Objects, &scenario.Object{APIVersion: "networking.istio.io/v1", Kind: kind, Namespace: ns, Name: name, Doc: doc})
	}
	for _, g := range out.Gateways {
		add("Gateway", g.Namespace, g.Name, g)
	}
	for _, vs := range out.VirtualServices {
		add("VirtualService", vs.Namespace, vs.Name, vs)
	}
	return &next
}
