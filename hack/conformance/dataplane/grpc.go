package dataplane

import (
	"net"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
)

type anyMessage = proto.Message

// apiListenerHCM returns an API listener's connection manager (nil if the
// listener has none).
func apiListenerHCM(l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	h, _ := unmarshalAny[hcmv3.HttpConnectionManager](l.GetApiListener().GetApiListener())
	return h
}

// chainHCM returns a filter chain's connection manager (nil if none).
func chainHCM(fc *listenerv3.FilterChain) *hcmv3.HttpConnectionManager {
	for _, f := range fc.GetFilters() {
		if h, ok := unmarshalAny[hcmv3.HttpConnectionManager](f.GetTypedConfig()); ok {
			return h
		}
	}
	return nil
}

// grpc decides an RPC of a proxyless gRPC client (grpc-go's xDS client):
// the Listener named after the target must be an API listener whose
// filters end with the router; the virtual host is picked by the target;
// only route actions that forward are supported; timeouts come from
// max_stream_duration; faults from the fault filter. Header rewrites and
// other Envoy-only route fields have no effect.
func (e *evaluator) grpc() Decision {
	fail := func(reason string) Decision { return e.done(Decision{Outcome: Fail, Reason: reason}) }
	l := e.cfg.Listener(e.req.Target)
	if l == nil {
		return fail("listener not found")
	}
	e.note("listener %s", l.GetName())
	h := apiListenerHCM(l)
	if h == nil {
		return fail("listener has no API listener")
	}
	filters := h.GetHttpFilters()
	if len(filters) == 0 || !isRouter(filters[len(filters)-1]) {
		return fail("listener NACKed: http filters must end with the router")
	}
	rc := e.routeConfig(h)
	if rc == nil {
		return fail("route configuration not found")
	}
	host := e.req.Target
	vh := pickVirtualHost(rc.GetVirtualHosts(), host)
	if vh == nil {
		if hp, _, err := net.SplitHostPort(host); err == nil {
			vh = pickVirtualHost(rc.GetVirtualHosts(), hp)
		}
	}
	if vh == nil {
		return fail("no virtual host")
	}
	e.note("virtual host %s", vh.GetName())
	var r *routev3.Route
	for _, x := range vh.GetRoutes() {
		if len(x.GetMatch().GetQueryParameters()) > 0 {
			continue // grpc-go ignores routes that match query parameters
		}
		if e.routeMatches(x.GetMatch()) {
			r = x
			break
		}
	}
	if r == nil {
		return fail("no route")
	}
	a := r.GetRoute()
	if a == nil {
		return fail("matched route does not have a supported route action type")
	}
	d := Decision{Outcome: Forward}
	d.Policy = grpcPolicies(a, vh)
	for _, f := range filters {
		if _, ok := unmarshalAny[faultv3.HTTPFault](f.GetTypedConfig()); ok {
			fault, _ := unmarshalAny[faultv3.HTTPFault](f.GetTypedConfig())
			if pr, off := (perFilter{route: r, vhost: vh, rc: rc}).lookup(f.GetName()); !off {
				if o, ok := unmarshalAny[faultv3.HTTPFault](pr); ok {
					fault = o
				}
				if s := faultSummary(fault); s != "" {
					d.Policy = append(d.Policy, s)
				}
			}
		}
	}
	type target struct {
		name   string
		weight uint32
	}
	var targets []target
	switch cs := a.GetClusterSpecifier().(type) {
	case *routev3.RouteAction_Cluster:
		targets = append(targets, target{cs.Cluster, 1})
	case *routev3.RouteAction_WeightedClusters:
		for _, w := range cs.WeightedClusters.GetClusters() {
			if w.GetWeight().GetValue() > 0 {
				targets = append(targets, target{w.GetName(), w.GetWeight().GetValue()})
			}
		}
	default:
		return fail("unsupported cluster specifier")
	}
	var total uint64
	for _, t := range targets {
		total += uint64(t.weight)
	}
	for _, t := range targets {
		c := e.describeCluster(t.name)
		if !c.Missing && c.Discovery != "eds" && c.Discovery != "logical_dns" && !strings.HasPrefix(c.Discovery, "custom:") {
			return fail("cluster type " + c.Discovery + " not supported by grpc")
		}
		d.Upstreams = append(d.Upstreams, Upstream{Weight: uint32(uint64(t.weight) * 1000000 / total), Cluster: c})
	}
	return e.done(d)
}

// grpcPolicies are the route settings grpc-go reads.
func grpcPolicies(a *routev3.RouteAction, vh *routev3.VirtualHost) []string {
	// grpc-go caps an RPC at grpc_timeout_header_max if set, else at
	// max_stream_duration; zero is no cap.
	timeout := "none"
	if m := a.GetMaxStreamDuration(); m != nil {
		d := m.GetMaxStreamDuration()
		if m.GetGrpcTimeoutHeaderMax() != nil {
			d = m.GetGrpcTimeoutHeaderMax()
		}
		if d.AsDuration() > 0 {
			timeout = d.AsDuration().String()
		}
	}
	out := []string{"grpc timeout=" + timeout}
	rp := a.GetRetryPolicy()
	if rp == nil {
		rp = vh.GetRetryPolicy()
	}
	if rp != nil {
		out = append(out, "grpc "+retrySummary(rp))
	}
	var hashes []string
	for _, hp := range a.GetHashPolicy() {
		hashes = append(hashes, hashSummary(hp))
	}
	if len(hashes) > 0 {
		out = append(out, "grpc hash=["+strings.Join(hashes, " ")+"]")
	}
	return out
}
