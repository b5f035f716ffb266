package validate

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/xds/envoyfilter"
)

// maxProxyVersionLen bounds the proxyVersion regular expression, as Istio
// does: a longer one is ignored with a warning, not compiled.
const maxProxyVersionLen = 1024

// checkEnvoyFilter is Istio's ValidateEnvoyFilter: its standing warning;
// a selector without wildcards; per patch, applyTo, operation and value
// present, the proxy version a regular expression, the match's kind the
// one applyTo patches, filter and sub-filter names where a match needs
// them; and the patch value decoded as the Envoy type applyTo names
// (refused if it does not decode with unknown fields dropped, warned if
// it has unknown fields, deprecated types or filters without
// typed_config).
func checkEnvoyFilter(m proto.Message, _ *meta, p *problems) {
	ef := m.(*networking.EnvoyFilter)
	if ef.GetWorkloadSelector() != nil && len(ef.GetTargetRefs()) > 0 {
		p.add("spec", "only one of targetRefs or workloadSelector can be set") // the CRD's rule
	}
	p.warn("spec", "EnvoyFilter exposes internal implementation details that may change at any time. "+
		"Prefer other APIs if possible, and exercise extreme caution, especially around upgrades.")
	if sel := ef.GetWorkloadSelector(); sel != nil {
		before := len(p.list)
		checkAlphaSelector(p, "spec.workloadSelector.labels", sel.GetLabels())
		if len(p.list) > before {
			return // Istio stops at a bad selector
		}
		if len(sel.GetLabels()) == 0 {
			p.warn("spec.workloadSelector", "Envoy filter: workload selector specified without labels, will be applied to all services in namespace")
		}
	}
	for i, cp := range ef.GetConfigPatches() {
		checkConfigPatch(p, at("spec.configPatches", i), cp)
	}
}

// checkAlphaSelector is Istio's ValidateAlphaWorkloadSelector's errors.
func checkAlphaSelector(p *problems, path string, labels map[string]string) {
	for _, k := range sortedKeys(labels) {
		v := labels[k]
		if k == "" {
			p.add(path, "empty key is not supported in selector: %q", k+"="+v)
		}
		if strings.Contains(k, "*") || strings.Contains(v, "*") {
			p.add(path, "wildcard is not supported in selector: %q", k+"="+v)
		}
	}
}

func checkConfigPatch(p *problems, path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) {
	if cp != nil && cp.GetMatch() != nil {
		// The CRD's rules.
		m := cp.GetMatch()
		if (m.GetContext() == networking.EnvoyFilter_WAYPOINT) != (m.GetWaypoint() != nil) {
			p.add(path+".match", "only support waypointMatch when context is WAYPOINT")
		}
		if n := m.GetWaypoint().GetPortNumber(); n > 65535 {
			p.add(path+".match.waypoint.portNumber", "port must be between 1-65535")
		}
	}
	switch {
	case cp == nil:
		p.add(path, "Envoy filter: null config patch")
		return
	case cp.GetMatch().GetContext() == networking.EnvoyFilter_WAYPOINT:
		return // not validated by Istio either
	case cp.GetApplyTo() == networking.EnvoyFilter_INVALID:
		p.add(path+".applyTo", "Envoy filter: missing applyTo")
		return
	case cp.GetPatch() == nil:
		p.add(path+".patch", "Envoy filter: missing patch")
		return
	case cp.GetPatch().GetOperation() == networking.EnvoyFilter_Patch_INVALID:
		p.add(path+".patch.operation", "Envoy filter: missing patch operation")
		return
	case cp.GetPatch().GetOperation() != networking.EnvoyFilter_Patch_REMOVE && cp.GetPatch().GetValue() == nil:
		p.add(path+".patch.value", "Envoy filter: missing patch value for non-remove operation")
		return
	}
	if v := cp.GetMatch().GetProxy().GetProxyVersion(); v != "" {
		if len(v) > maxProxyVersionLen {
			p.warn(path+".match.proxy.proxyVersion", "Envoy filter: proxyVersion match exceeds %d characters and will be ignored", maxProxyVersionLen)
		} else if _, err := regexp.Compile(v); err != nil {
			p.add(path+".match.proxy.proxyVersion", "Envoy filter: invalid regex for proxy version, [%v]", err)
			return
		}
	}
	if !checkPatchMatch(p, path, cp) {
		return
	}
	checkPatchValue(p, path+".patch.value", cp.GetApplyTo(), cp.GetPatch().GetValue())
}

// checkPatchMatch checks that the match is of the kind applyTo patches;
// false means Istio skips the rest of the patch.
func checkPatchMatch(p *problems, path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
	match := cp.GetMatch()
	if match == nil || match.GetObjectTypes() == nil {
		return true
	}
	switch cp.GetApplyTo() {
	case networking.EnvoyFilter_LISTENER, networking.EnvoyFilter_FILTER_CHAIN,
		networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_HTTP_FILTER:
		lm := match.GetListener()
		if lm == nil {
			p.add(path+".match", "Envoy filter: applyTo for listener class objects cannot have non listener match")
			return false
		}
		f := lm.GetFilterChain().GetFilter()
		if f == nil {
			return true
		}
		if cp.GetApplyTo() == networking.EnvoyFilter_LISTENER || cp.GetApplyTo() == networking.EnvoyFilter_FILTER_CHAIN {
			p.warn(path+".match", "Envoy filter: filter match has no effect when used with %v", cp.GetApplyTo())
		}
		fpath := path + ".match.listener.filterChain.filter"
		if f.GetName() == "" {
			p.add(fpath, "Envoy filter: filter match has no name to match on")
			return false
		}
		if sf := f.GetSubFilter(); sf != nil {
			switch {
			case cp.GetApplyTo() != networking.EnvoyFilter_HTTP_FILTER:
				p.add(fpath+".subFilter", "Envoy filter: subfilter match can be used with applyTo HTTP_FILTER only")
				return false
			case f.GetName() != wellknown.HTTPConnectionManager && f.GetName() != "envoy.http_connection_manager":
				p.add(fpath+".subFilter", "Envoy filter: subfilter match requires filter match with %s", wellknown.HTTPConnectionManager)
				return false
			case sf.GetName() == "":
				p.add(fpath+".subFilter", "Envoy filter: subfilter match has no name to match on")
				return false
			}
		}
		for _, name := range []string{f.GetName(), f.GetSubFilter().GetName()} {
			if repl, ok := deprecatedFilterNames[name]; ok {
				p.warn(fpath, "using deprecated filter name %q; use %q instead", name, repl)
			}
		}
	case networking.EnvoyFilter_ROUTE_CONFIGURATION, networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_HTTP_ROUTE:
		if match.GetRouteConfiguration() == nil {
			p.add(path+".match", "Envoy filter: applyTo for http route class objects cannot have non route configuration match")
		}
	case networking.EnvoyFilter_CLUSTER:
		if match.GetCluster() == nil {
			p.add(path+".match", "Envoy filter: applyTo for cluster class objects cannot have non cluster match")
		}
	}
	return true
}

// DecodePatch decodes an EnvoyFilter patch value as the Envoy type applyTo
// names (envoyfilter.DecodePatch, which generation uses too).
func DecodePatch(applyTo networking.EnvoyFilter_ApplyTo, value *structpb.Struct, strict bool) (proto.Message, error) {
	return envoyfilter.DecodePatch(applyTo, value, strict)
}

func checkPatchValue(p *problems, path string, applyTo networking.EnvoyFilter_ApplyTo, value *structpb.Struct) {
	obj, err := DecodePatch(applyTo, value, false)
	if err != nil {
		msg := cleanProto(err.Error())
		if strings.Contains(msg, "unable to resolve") || strings.Contains(msg, "could not resolve Any message type") {
			if strings.Contains(msg, ".v2.") {
				msg = "referenced type unknown (hint: try using the v3 XDS API): " + msg
			} else {
				msg = "referenced type unknown: " + msg
			}
		}
		p.add(path, "%s", msg)
		return
	}
	if _, err := DecodePatch(applyTo, value, true); err != nil {
		p.warn(path, "%s", cleanProto(err.Error()))
	}
	if missing := missingTypedConfig(obj.ProtoReflect()); len(missing) > 0 {
		p.warn(path, "using deprecated types by name without typed_config; %v", strings.Join(missing, ", "))
	}
}

// cleanProto drops protobuf's "proto: " prefix, whose space is sometimes
// a no-break space.
func cleanProto(s string) string {
	return strings.NewReplacer("proto:\u00a0", "", "proto: ", "").Replace(s)
}

// missingTypedConfig names the filters that rely on their name and leave
// typed_config out (configDiscovery counts as typed), as Istio's
// recurseMissingTypedConfig.
func missingTypedConfig(m protoreflect.Message) []string {
	var out []string
	fields := m.Descriptor().Fields()
	name := ""
	for i := 0; i < fields.Len(); i++ {
		if f := fields.Get(i); f.JSONName() == "name" {
			name = fmt.Sprintf("%v", m.Get(f).Interface())
		}
	}
	requires, has := false, false
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		set := m.Has(f)
		requires = requires || f.JSONName() == "typedConfig"
		if set && (f.JSONName() == "typedConfig" || f.JSONName() == "configDiscovery") {
			has = true
		}
		if set && f.Kind() == protoreflect.MessageKind && !f.IsList() && !f.IsMap() {
			out = append(out, missingTypedConfig(m.Get(f).Message())...)
		}
	}
	if requires && !has {
		out = append(out, name)
	}
	return out
}

// deprecatedFilterNames maps the filter names Envoy deprecated to their
// replacements (Istio's xds.ReverseDeprecatedFilterNames).
var deprecatedFilterNames = map[string]string{
	"envoy.buffer":                  wellknown.Buffer,
	"envoy.cors":                    wellknown.CORS,
	"envoy.csrf":                    "envoy.filters.http.csrf",
	"envoy.http_dynamo_filter":      wellknown.Dynamo,
	"envoy.ext_authz":               wellknown.HTTPExternalAuthorization,
	"envoy.fault":                   wellknown.Fault,
	"envoy.grpc_http1_bridge":       wellknown.GRPCHTTP1Bridge,
	"envoy.grpc_json_transcoder":    wellknown.GRPCJSONTranscoder,
	"envoy.grpc_web":                wellknown.GRPCWeb,
	"envoy.gzip":                    wellknown.Gzip,
	"envoy.health_check":            wellknown.HealthCheck,
	"envoy.ip_tagging":              wellknown.IPTagging,
	"envoy.lua":                     wellknown.Lua,
	"envoy.rate_limit":              wellknown.HTTPRateLimit,
	"envoy.router":                  wellknown.Router,
	"envoy.squash":                  wellknown.Squash,
	"envoy.listener.http_inspector": wellknown.HTTPInspector,
	"envoy.listener.original_dst":   wellknown.OriginalDestination,
	"envoy.listener.original_src":   "envoy.filters.listener.original_src",
	"envoy.listener.proxy_protocol": wellknown.ProxyProtocol,
	"envoy.listener.tls_inspector":  wellknown.TLSInspector,
	"envoy.client_ssl_auth":         wellknown.ClientSSLAuth,
	"envoy.http_connection_manager": wellknown.HTTPConnectionManager,
	"envoy.mongo_proxy":             wellknown.MongoProxy,
	"envoy.ratelimit":               wellknown.RateLimit,
	"envoy.redis_proxy":             wellknown.RedisProxy,
	"envoy.tcp_proxy":               wellknown.TCPProxy,
}
