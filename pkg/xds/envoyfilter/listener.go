package envoyfilter

import (
	"slices"
	"strings"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// Names istiod's matches treat specially.
const (
	virtualInbound        = "virtualInbound"
	virtualOutbound       = "virtualOutbound"
	httpConnectionManager = "envoy.filters.network.http_connection_manager"
)

// PatchListener applies the LISTENER, LISTENER_FILTER, FILTER_CHAIN,
// NETWORK_FILTER and HTTP_FILTER patches of ps for context ctx to l, in
// place, as istiod's patchListener; false means a REMOVE patch removed it.
// The filters whose patches changed l are noted in applied.
func PatchListener(ctx networking.EnvoyFilter_PatchContext, ps Patches, l *listener.Listener, applied Applied) bool {
	if l.GetName() == "" {
		return true
	}
	for _, p := range ps[networking.EnvoyFilter_LISTENER] {
		if !p.contextMatch(ctx) || !listenerMatch(l, p) {
			continue
		}
		switch {
		case p.Operation == networking.EnvoyFilter_Patch_REMOVE:
			applied.note(p)
			return false
		case isMerge(p.Operation):
			mergeValue(p.Operation, l, p.Value)
			applied.note(p)
		}
	}
	patchListenerFilters(ctx, ps[networking.EnvoyFilter_LISTENER_FILTER], l, applied)
	patchFilterChains(ctx, ps, l, applied)
	return true
}

// AddedListeners are clones of the listeners ps's ADD patches add for
// ctx; a patch of context ANY adds only to SIDECAR_OUTBOUND and GATEWAY,
// as in istiod.
func AddedListeners(ctx networking.EnvoyFilter_PatchContext, ps Patches, applied Applied) []*listener.Listener {
	var out []*listener.Listener
	for _, p := range ps[networking.EnvoyFilter_LISTENER] {
		if p.Operation != networking.EnvoyFilter_Patch_ADD || !addsIn(ctx, p) {
			continue
		}
		out = append(out, proto.Clone(p.Value).(*listener.Listener))
		applied.note(p)
	}
	return out
}

// addsIn is istiod's rule for ADD of whole listeners and clusters.
func addsIn(ctx networking.EnvoyFilter_PatchContext, p *Patch) bool {
	if p.Match.GetContext() == networking.EnvoyFilter_ANY {
		return ctx == networking.EnvoyFilter_SIDECAR_OUTBOUND || ctx == networking.EnvoyFilter_GATEWAY
	}
	return p.contextMatch(ctx)
}

func patchListenerFilters(ctx networking.EnvoyFilter_PatchContext, ps []*Patch, l *listener.Listener, applied Applied) {
	for _, p := range ps {
		if !p.contextMatch(ctx) || !listenerMatch(l, p) {
			continue
		}
		name := p.Match.GetListener().GetListenerFilter()
		match := func(f *listener.ListenerFilter) bool { return name == "" || f.GetName() == name }
		value := func() *listener.ListenerFilter { return proto.Clone(p.Value).(*listener.ListenerFilter) }
		before := len(l.ListenerFilters)
		changed := true
		switch p.Operation {
		case networking.EnvoyFilter_Patch_ADD:
			l.ListenerFilters = append(l.ListenerFilters, value())
		case networking.EnvoyFilter_Patch_INSERT_FIRST:
			l.ListenerFilters = insertAt(l.ListenerFilters, 0, value())
		case networking.EnvoyFilter_Patch_INSERT_AFTER, networking.EnvoyFilter_Patch_INSERT_BEFORE:
			l.ListenerFilters, changed = insertRelative(l.ListenerFilters, p.Operation, name != "", match, value)
		case networking.EnvoyFilter_Patch_REPLACE:
			changed = false
			if i := index(l.ListenerFilters, match); name != "" && i >= 0 {
				l.ListenerFilters[i], changed = value(), true
			}
		case networking.EnvoyFilter_Patch_REMOVE:
			if name != "" {
				l.ListenerFilters = slices.DeleteFunc(l.ListenerFilters, match)
			}
			changed = len(l.ListenerFilters) != before
		case networking.EnvoyFilter_Patch_MERGE:
			changed = false
			if name == "" {
				break
			}
			for _, f := range l.ListenerFilters {
				if match(f) && mergeListenerFilter(f, p.Value.(*listener.ListenerFilter)) {
					changed = true
				}
			}
		default:
			changed = false
		}
		if changed {
			applied.note(p)
		}
	}
}

// insertRelative is INSERT_BEFORE / INSERT_AFTER on a filter list:
// without a filter to be relative to (hasMatch false) the value goes
// first (BEFORE) or last (AFTER); otherwise next to the first match, or
// nowhere when none matches.
func insertRelative[E any](s []E, op networking.EnvoyFilter_Patch_Operation, hasMatch bool, match func(E) bool, value func() E) ([]E, bool) {
	after := op == networking.EnvoyFilter_Patch_INSERT_AFTER
	if !hasMatch {
		if after {
			return append(s, value()), true
		}
		return insertAt(s, 0, value()), true
	}
	i := index(s, match)
	if i < 0 {
		return s, false
	}
	if after {
		i++
	}
	return insertAt(s, i, value()), true
}

// mergeListenerFilter is istiod's: only a filter with a typed_config is
// merged, and only its typed_config (istiod sets the patch value's name,
// never the filter's: a name in the patch has no effect).
func mergeListenerFilter(f, patch *listener.ListenerFilter) bool {
	if f.GetTypedConfig() == nil {
		return false
	}
	if patch.GetTypedConfig() == nil {
		return true
	}
	merged, err := MergeAny(f.GetTypedConfig(), patch.GetTypedConfig())
	if err != nil {
		return false
	}
	f.ConfigType = &listener.ListenerFilter_TypedConfig{TypedConfig: merged}
	return true
}

func patchFilterChains(ctx networking.EnvoyFilter_PatchContext, ps Patches, l *listener.Listener, applied Applied) {
	removed := map[*listener.FilterChain]bool{}
	for _, fc := range l.FilterChains {
		if !patchFilterChain(ctx, ps, l, fc, applied) {
			removed[fc] = true
		}
	}
	if fc := l.GetDefaultFilterChain(); fc != nil && !patchFilterChain(ctx, ps, l, fc, applied) {
		l.DefaultFilterChain = nil
	}
	for _, p := range ps[networking.EnvoyFilter_FILTER_CHAIN] {
		if p.Operation == networking.EnvoyFilter_Patch_ADD && p.contextMatch(ctx) && listenerMatch(l, p) {
			l.FilterChains = append(l.FilterChains, proto.Clone(p.Value).(*listener.FilterChain))
			applied.note(p)
		}
	}
	if len(removed) > 0 {
		l.FilterChains = slices.DeleteFunc(l.FilterChains, func(fc *listener.FilterChain) bool { return removed[fc] })
	}
}

// patchFilterChain patches one chain; false means REMOVE removed it.
func patchFilterChain(ctx networking.EnvoyFilter_PatchContext, ps Patches, l *listener.Listener, fc *listener.FilterChain, applied Applied) bool {
	for _, p := range ps[networking.EnvoyFilter_FILTER_CHAIN] {
		if !p.contextMatch(ctx) || !listenerMatch(l, p) || !filterChainMatch(l, fc, p) {
			continue
		}
		switch {
		case p.Operation == networking.EnvoyFilter_Patch_REMOVE:
			applied.note(p)
			return false
		case isMerge(p.Operation):
			if !mergeChainTransportSocket(fc, p.Value.(*listener.FilterChain)) {
				mergeValue(p.Operation, fc, p.Value)
			}
			applied.note(p)
		}
	}
	patchNetworkFilters(ctx, ps, l, fc, applied)
	return true
}

// mergeChainTransportSocket is istiod's mergeTransportSocketListener: a
// patch whose transport socket has the chain's socket's name merges the
// typed configs (and nothing else of the patch); true means done.
func mergeChainTransportSocket(fc, patch *listener.FilterChain) bool {
	pts, ts := patch.GetTransportSocket(), fc.GetTransportSocket()
	if pts == nil || ts == nil || pts.GetName() != ts.GetName() {
		return false
	}
	if ts.GetTypedConfig() != nil && pts.GetTypedConfig() != nil {
		if merged, err := MergeAny(ts.GetTypedConfig(), pts.GetTypedConfig()); err == nil {
			proto.Reset(ts.GetTypedConfig())
			proto.Merge(ts.GetTypedConfig(), merged)
		}
	}
	return true
}

func patchNetworkFilters(ctx networking.EnvoyFilter_PatchContext, ps Patches, l *listener.Listener, fc *listener.FilterChain, applied Applied) {
	for _, p := range ps[networking.EnvoyFilter_NETWORK_FILTER] {
		if !p.contextMatch(ctx) || !listenerMatch(l, p) || !filterChainMatch(l, fc, p) {
			continue
		}
		fm := p.Match.GetListener().GetFilterChain().GetFilter()
		match := func(f *listener.Filter) bool { return fm == nil || f.GetName() == fm.GetName() }
		value := func() *listener.Filter { return proto.Clone(p.Value).(*listener.Filter) }
		before := len(fc.Filters)
		changed := true
		switch p.Operation {
		case networking.EnvoyFilter_Patch_ADD:
			fc.Filters = append(fc.Filters, value())
		case networking.EnvoyFilter_Patch_INSERT_FIRST:
			fc.Filters = insertAt(fc.Filters, 0, value())
		case networking.EnvoyFilter_Patch_INSERT_AFTER, networking.EnvoyFilter_Patch_INSERT_BEFORE:
			fc.Filters, changed = insertRelative(fc.Filters, p.Operation, fm != nil, match, value)
		case networking.EnvoyFilter_Patch_REPLACE:
			changed = false
			if i := index(fc.Filters, match); fm != nil && i >= 0 {
				fc.Filters[i], changed = value(), true
			}
		case networking.EnvoyFilter_Patch_REMOVE:
			if fm != nil {
				fc.Filters = slices.DeleteFunc(fc.Filters, match)
			}
			changed = len(fc.Filters) != before
		default:
			changed = false // MERGE: below, per filter
		}
		if changed {
			applied.note(p)
		}
	}
	for _, f := range fc.Filters {
		patchNetworkFilter(ctx, ps, l, fc, f, applied)
	}
}

// patchNetworkFilter merges the MERGE patches into one filter (its
// typed_config, and its name if the patch has one), then patches the
// HTTP filters of an HTTP connection manager.
func patchNetworkFilter(ctx networking.EnvoyFilter_PatchContext, ps Patches, l *listener.Listener, fc *listener.FilterChain, f *listener.Filter, applied Applied) {
	for _, p := range ps[networking.EnvoyFilter_NETWORK_FILTER] {
		if p.Operation != networking.EnvoyFilter_Patch_MERGE || !p.contextMatch(ctx) || !listenerMatch(l, p) ||
			!filterChainMatch(l, fc, p) || !networkFilterMatch(f, p) || f.GetTypedConfig() == nil {
			continue
		}
		pf := p.Value.(*listener.Filter)
		if pf.GetName() != "" {
			f.Name = pf.GetName()
		}
		if pf.GetTypedConfig() != nil {
			if merged, err := MergeAny(f.GetTypedConfig(), pf.GetTypedConfig()); err == nil {
				f.ConfigType = &listener.Filter_TypedConfig{TypedConfig: merged}
			}
		}
		applied.note(p)
	}
	if f.GetName() == httpConnectionManager {
		patchHTTPFilters(ctx, ps, l, fc, f, applied)
	}
}

func networkFilterMatch(f *listener.Filter, p *Patch) bool {
	fm := p.Match.GetListener().GetFilterChain().GetFilter()
	return fm == nil || fm.GetName() == f.GetName()
}

func patchHTTPFilters(ctx networking.EnvoyFilter_PatchContext, ps Patches, l *listener.Listener, fc *listener.FilterChain, f *listener.Filter, applied Applied) {
	var hc *hcm.HttpConnectionManager
	changed := false
	for _, p := range ps[networking.EnvoyFilter_HTTP_FILTER] {
		if !p.contextMatch(ctx) || !listenerMatch(l, p) || !filterChainMatch(l, fc, p) || !networkFilterMatch(f, p) {
			continue
		}
		if hc == nil {
			if hc = decodeHCM(f); hc == nil {
				return
			}
		}
		sf := p.Match.GetListener().GetFilterChain().GetFilter().GetSubFilter()
		match := func(h *hcm.HttpFilter) bool { return sf == nil || h.GetName() == sf.GetName() }
		value := func() *hcm.HttpFilter { return proto.Clone(p.Value).(*hcm.HttpFilter) }
		before := len(hc.HttpFilters)
		done := true
		switch p.Operation {
		case networking.EnvoyFilter_Patch_ADD:
			hc.HttpFilters = append(hc.HttpFilters, value())
		case networking.EnvoyFilter_Patch_INSERT_FIRST:
			hc.HttpFilters = insertAt(hc.HttpFilters, 0, value())
		case networking.EnvoyFilter_Patch_INSERT_AFTER, networking.EnvoyFilter_Patch_INSERT_BEFORE:
			hc.HttpFilters, done = insertRelative(hc.HttpFilters, p.Operation, sf != nil, match, value)
		case networking.EnvoyFilter_Patch_REPLACE:
			done = false
			if i := index(hc.HttpFilters, match); sf != nil && i >= 0 {
				hc.HttpFilters[i], done = value(), true
			}
		case networking.EnvoyFilter_Patch_REMOVE:
			if sf != nil {
				hc.HttpFilters = slices.DeleteFunc(hc.HttpFilters, match)
			}
			done = len(hc.HttpFilters) != before
		default:
			done = false // MERGE: below, per HTTP filter
		}
		if done {
			applied.note(p)
			changed = true
		}
	}
	if hc == nil {
		return
	}
	for _, h := range hc.HttpFilters {
		if mergeHTTPFilter(ctx, ps, l, fc, f, h, applied) {
			changed = true
		}
	}
	if changed {
		if a, err := toAny(hc); err == nil {
			f.ConfigType = &listener.Filter_TypedConfig{TypedConfig: a}
		}
	}
}

// decodeHCM is f's HTTP connection manager, nil when it has none that
// decodes (istiod then leaves the filter alone).
func decodeHCM(f *listener.Filter) *hcm.HttpConnectionManager {
	if f.GetTypedConfig() == nil {
		return nil
	}
	hc := &hcm.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(hc); err != nil {
		return nil
	}
	return hc
}

func mergeHTTPFilter(ctx networking.EnvoyFilter_PatchContext, ps Patches, l *listener.Listener, fc *listener.FilterChain, f *listener.Filter, h *hcm.HttpFilter, applied Applied) bool {
	changed := false
	for _, p := range ps[networking.EnvoyFilter_HTTP_FILTER] {
		if p.Operation != networking.EnvoyFilter_Patch_MERGE || !p.contextMatch(ctx) || !listenerMatch(l, p) ||
			!filterChainMatch(l, fc, p) || !networkFilterMatch(f, p) || h.GetTypedConfig() == nil {
			continue
		}
		if sf := p.Match.GetListener().GetFilterChain().GetFilter().GetSubFilter(); sf != nil && sf.GetName() != h.GetName() {
			continue
		}
		ph := p.Value.(*hcm.HttpFilter)
		if ph.GetName() != "" {
			h.Name = ph.GetName()
		}
		if ph.GetTypedConfig() != nil {
			if merged, err := MergeAny(h.GetTypedConfig(), ph.GetTypedConfig()); err == nil {
				h.ConfigType = &hcm.HttpFilter_TypedConfig{TypedConfig: merged}
			}
		}
		applied.note(p)
		changed = true
	}
	return changed
}

// listenerMatch is istiod's: the listener name, and its port, except for
// patches below LISTENER on the virtual listeners, whose port is matched
// on the filter chain's destination port instead.
func listenerMatch(l *listener.Listener, p *Patch) bool {
	lm := p.Match.GetListener()
	if lm == nil {
		return true
	}
	if lm.GetName() != "" && lm.GetName() != l.GetName() {
		return false
	}
	if p.ApplyTo != networking.EnvoyFilter_LISTENER && (l.GetName() == virtualInbound || l.GetName() == virtualOutbound) {
		return true
	}
	if lm.GetPortNumber() != 0 {
		sa := l.GetAddress().GetSocketAddress()
		if sa == nil || sa.GetPortValue() != lm.GetPortNumber() {
			return false
		}
	}
	return true
}

// filterChainMatch is istiod's.
func filterChainMatch(l *listener.Listener, fc *listener.FilterChain, p *Patch) bool {
	lm := p.Match.GetListener()
	if lm == nil {
		return true
	}
	virtual := l.GetName() == virtualInbound || l.GetName() == virtualOutbound
	fcm := fc.GetFilterChainMatch()
	if virtual && lm.GetPortNumber() > 0 && fcm.GetDestinationPort().GetValue() != lm.GetPortNumber() {
		return false
	}
	m := lm.GetFilterChain()
	if m == nil {
		return true
	}
	if m.GetName() != "" && m.GetName() != fc.GetName() {
		return false
	}
	if m.GetSni() != "" && !slices.Contains(fcm.GetServerNames(), m.GetSni()) {
		return false
	}
	if m.GetTransportProtocol() != "" && (fcm == nil || fcm.GetTransportProtocol() != m.GetTransportProtocol()) {
		return false
	}
	if m.GetApplicationProtocols() != "" {
		if fcm == nil {
			return false
		}
		for _, ap := range strings.Split(m.GetApplicationProtocols(), ",") {
			if !slices.Contains(fcm.GetApplicationProtocols(), ap) {
				return false
			}
		}
	}
	if m.GetDestinationPort() > 0 && (fcm.GetDestinationPort() == nil || fcm.GetDestinationPort().GetValue() != m.GetDestinationPort()) {
		return false
	}
	return true
}
