package gatewayapi

import gw "sigs.k8s.io/gateway-api/apis/v1"

// listenerConflicts finds the listeners of one Gateway that conflict with
// an earlier one (in spec order, as the spec and istiod's
// ComputeGatewayListenerConflicts decide): on one port, two HTTP-like
// listeners (HTTP, HTTPS, TLS) conflict when their hostnames are the same
// (ProtocolConflict if their protocols differ, else HostnameConflict);
// TCP (or UDP) beside anything else conflicts (ProtocolConflict). The
// first of a conflicting pair keeps its place; the later is not accepted.
// The result maps a listener's index to its reason.
func listenerConflicts(ls []gw.Listener) map[int]gw.ListenerConditionReason {
	out := map[int]gw.ListenerConditionReason{}
	var kept []gw.Listener
	for i, l := range ls {
		conflict := false
		for _, prior := range kept {
			if reason, ok := conflictOf(l, prior); ok {
				out[i], conflict = reason, true
				break
			}
		}
		if !conflict {
			kept = append(kept, l)
		}
	}
	return out
}

// conflictOf says whether a and b cannot both be served, and why.
func conflictOf(a, b gw.Listener) (gw.ListenerConditionReason, bool) {
	if a.Port != b.Port {
		return "", false
	}
	if httpLike(a.Protocol) && httpLike(b.Protocol) {
		if hostnameOrAny(a) != hostnameOrAny(b) {
			return "", false // told apart by SNI or Host
		}
		if a.Protocol != b.Protocol {
			return gw.ListenerReasonProtocolConflict, true
		}
		return gw.ListenerReasonHostnameConflict, true
	}
	if tcpUDP(a.Protocol) || tcpUDP(b.Protocol) {
		return gw.ListenerReasonProtocolConflict, true // nothing to tell them apart
	}
	if a.Protocol != b.Protocol {
		return gw.ListenerReasonProtocolConflict, true
	}
	return "", false
}

func hostnameOrAny(l gw.Listener) string {
	if h := ptrOr(l.Hostname, ""); h != "" {
		return string(h)
	}
	return "*"
}

func httpLike(p gw.ProtocolType) bool {
	return p == gw.HTTPProtocolType || p == gw.HTTPSProtocolType || p == gw.TLSProtocolType
}

func tcpUDP(p gw.ProtocolType) bool { return p == gw.TCPProtocolType || p == gw.UDPProtocolType }
