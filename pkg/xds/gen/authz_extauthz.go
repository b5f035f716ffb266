package gen

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extauthztcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

// This file resolves the MeshConfig extension providers a CUSTOM
// AuthorizationPolicy names (envoyExtAuthzHttp, envoyExtAuthzGrpc) into
// Envoy ext_authz filter configurations, as istiod's processExtensionProvider
// does (pilot/pkg/security/authz/builder/extauthz.go); authz_custom.go puts
// them on the chains.

// Names of the metadata the CUSTOM action's shadow RBAC filter leaves for
// the ext_authz filter (filter_enabled_metadata), as istiod names them.
const (
	extAuthzMatchPrefix         = "istio-ext-authz"
	extAuthzShadowStatPrefix    = "istio_ext_authz_"
	shadowEffectivePolicyIDKey  = "shadow_effective_policy_id"
	extAuthzDefaultTimeoutSecs  = 600
	extAuthzTCPStatPrefix       = "tcp."
	extAuthzHTTPRBACFilterName  = "envoy.filters.http.rbac"
	extAuthzTCPRBACFilterName   = "envoy.filters.network.rbac"
	extAuthzProviderNameMaxSize = 63
)

// extAuthzProvider is one resolved ext_authz provider: its HTTP filter
// config, its network filter config (gRPC providers only: istiod builds no
// TCP ext_authz for an HTTP provider, whose CUSTOM policies then do not
// apply to TCP chains), or the error that makes every CUSTOM policy naming it fail
// closed.
type extAuthzProvider struct {
	http *extauthzhttpv3.ExtAuthz
	tcp  *extauthztcpv3.ExtAuthz
	err  error
}

// extAuthzProviders resolves the ext_authz providers of the mesh config,
// by name. Providers of other types are left out; a provider with an
// error is kept with it, so that a policy naming it is denied with the
// reason.
func extAuthzProviders(look meshLookup) map[string]*extAuthzProvider {
	out := map[string]*extAuthzProvider{}
	for i, p := range look.mesh.GetExtensionProviders() {
		var errs []error
		switch {
		case p.GetName() == "":
			errs = append(errs, fmt.Errorf("extension provider name must not be empty, found empty at index: %d", i))
		case out[p.GetName()] != nil:
			errs = append(errs, fmt.Errorf("extension provider name must be unique, found duplicate: %s", p.GetName()))
		}
		if p.GetName() != "" {
			if err := validExtAuthzProviderName(p.GetName()); err != nil {
				errs = append(errs, fmt.Errorf("invalid provider name %q: %w", p.GetName(), err))
			}
		}
		var built *extAuthzProvider
		var err error
		switch prov := p.GetProvider().(type) {
		case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExtAuthzHttp:
			built, err = extAuthzHTTP(look, p.GetName(), prov.EnvoyExtAuthzHttp)
		case *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExtAuthzGrpc:
			built, err = extAuthzGRPC(look, p.GetName(), prov.EnvoyExtAuthzGrpc)
		default:
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to parse extension provider %q: %w", p.GetName(), err))
		}
		if built == nil {
			built = &extAuthzProvider{}
		}
		built.err = errors.Join(errs...)
		// As in istiod, a later entry of one name replaces the earlier
		// one, carrying the duplicate error: the name fails closed.
		out[p.GetName()] = built
	}
	return out
}

// extAuthzFor is the provider a CUSTOM policy names, or why there is
// none usable.
func extAuthzFor(resolved map[string]*extAuthzProvider, name string) (*extAuthzProvider, error) {
	if name == "" {
		return nil, errors.New("no provider specified in authorization policy")
	}
	p, ok := resolved[name]
	if !ok {
		names := make([]string, 0, len(resolved))
		for n := range resolved {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("available providers are %v but found %q", names, name)
	}
	if p.err != nil {
		return nil, fmt.Errorf("found errors in provider %s: %w", name, p.err)
	}
	return p, nil
}

// validExtAuthzProviderName is istiod's check that a provider name is safe
// in metadata keys and policy names: a DNS-1123 label.
func validExtAuthzProviderName(name string) error {
	if len(name) > extAuthzProviderNameMaxSize {
		return fmt.Errorf("provider name too long (max %d characters): %d", extAuthzProviderNameMaxSize, len(name))
	}
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		case c >= 'A' && c <= 'Z':
			return fmt.Errorf("uppercase letters not allowed (use lowercase): character %q at position %d", c, i)
		default:
			return fmt.Errorf("invalid character %q at position %d (only lowercase letters, digits, and hyphens allowed)", c, i)
		}
	}
	if strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") {
		return errors.New("provider name cannot start or end with hyphen")
	}
	return nil
}

// extAuthzTarget checks the port and finds the outbound cluster of the
// provider's service, "outbound|PORT||HOST", as istiod's LookupCluster.
func extAuthzTarget(look meshLookup, service string, port uint32) (host, cluster string, errs []error) {
	if port < 1 || port > 65535 {
		errs = append(errs, fmt.Errorf("port must be in the range [1, 65535], found: %d", port))
	}
	if service == "" {
		return "", "", append(errs, errors.New("service must not be empty"))
	}
	host, cluster, ok := look.cluster(service, port)
	if !ok {
		errs = append(errs, fmt.Errorf("could not find service %s in the service registry (or in more than one namespace: name it NAMESPACE/HOST)", service))
	}
	return host, cluster, errs
}

// extAuthzStatus parses statusOnError: an HTTP status code Envoy knows.
func extAuthzStatus(s string) (*typev3.HttpStatus, error) {
	if s == "" {
		return nil, nil
	}
	code, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("invalid statusOnError %q: %w", s, err)
	}
	if _, ok := typev3.StatusCode_name[int32(code)]; !ok {
		return nil, fmt.Errorf("unsupported statusOnError %s", s)
	}
	return &typev3.HttpStatus{Code: typev3.StatusCode(code)}, nil
}

func extAuthzTimeout(d *durationpb.Duration) *durationpb.Duration {
	if d == nil {
		return &durationpb.Duration{Seconds: extAuthzDefaultTimeoutSecs}
	}
	return d
}

func extAuthzHTTP(look meshLookup, name string, c *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider) (*extAuthzProvider, error) {
	host, cluster, errs := extAuthzTarget(look, c.GetService(), c.GetPort())
	status, err := extAuthzStatus(c.GetStatusOnError())
	if err != nil {
		errs = append(errs, err)
	}
	if pp := c.GetPathPrefix(); pp != "" {
		if _, err := url.Parse(pp); err != nil {
			errs = append(errs, fmt.Errorf("invalid pathPrefix %q: %w", pp, err))
		}
		if !strings.HasPrefix(pp, "/") {
			errs = append(errs, fmt.Errorf("pathPrefix must begin with `/`, found: %q", pp))
		}
	}
	for _, f := range []struct {
		name   string
		values []string
	}{
		{"IncludeRequestHeadersInCheck", c.GetIncludeRequestHeadersInCheck()},
		{"IncludeHeadersInCheck", c.GetIncludeHeadersInCheck()}, //nolint:staticcheck // deprecated, still read as istiod does
		{"HeadersToDownstreamOnDeny", c.GetHeadersToDownstreamOnDeny()},
		{"HeadersToDownstreamOnAllow", c.GetHeadersToDownstreamOnAllow()},
		{"HeadersToUpstreamOnAllow", c.GetHeadersToUpstreamOnAllow()},
	} {
		for _, v := range f.values {
			if v == "*" {
				errs = append(errs, fmt.Errorf("a single wildcard (\"*\") is not supported, change it to either prefix or suffix match: %s", f.name))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	svc := &extauthzhttpv3.HttpService{
		PathPrefix: c.GetPathPrefix(),
		ServerUri: &corev3.HttpUri{
			Timeout:          extAuthzTimeout(c.GetTimeout()),
			Uri:              "http://" + host, // required, unused by the filter
			HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: cluster},
		},
	}
	if add := c.GetIncludeAdditionalHeadersInCheck(); len(add) > 0 {
		keys := make([]string, 0, len(add))
		for k := range add {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		req := &extauthzhttpv3.AuthorizationRequest{}
		for _, k := range keys {
			req.HeadersToAdd = append(req.HeadersToAdd, &corev3.HeaderValue{Key: k, Value: add[k]})
		}
		svc.AuthorizationRequest = req
	}
	if len(c.GetHeadersToUpstreamOnAllow()) > 0 || len(c.GetHeadersToDownstreamOnDeny()) > 0 || len(c.GetHeadersToDownstreamOnAllow()) > 0 {
		svc.AuthorizationResponse = &extauthzhttpv3.AuthorizationResponse{
			AllowedUpstreamHeaders:        extAuthzHeaders(c.GetHeadersToUpstreamOnAllow()),
			AllowedClientHeaders:          extAuthzHeaders(c.GetHeadersToDownstreamOnDeny()),
			AllowedClientHeadersOnSuccess: extAuthzHeaders(c.GetHeadersToDownstreamOnAllow()),
		}
	}
	h := &extauthzhttpv3.ExtAuthz{
		StatusOnError:         status,
		FailureModeAllow:      c.GetFailOpen(),
		TransportApiVersion:   corev3.ApiVersion_V3,
		Services:              &extauthzhttpv3.ExtAuthz_HttpService{HttpService: svc},
		FilterEnabledMetadata: extAuthzEnabledMetadata(extAuthzHTTPRBACFilterName, name),
		WithRequestBody:       extAuthzBody(c.GetIncludeRequestBodyInCheck()),
	}
	allowed := extAuthzHeaders(c.GetIncludeRequestHeadersInCheck())
	if allowed == nil {
		// The deprecated field counts only where the new one is unset.
		allowed = extAuthzHeaders(c.GetIncludeHeadersInCheck()) //nolint:staticcheck // deprecated, still read as istiod does
	}
	h.AllowedHeaders = allowed
	return &extAuthzProvider{http: h}, nil
}

func extAuthzGRPC(look meshLookup, name string, c *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider) (*extAuthzProvider, error) {
	host, cluster, errs := extAuthzTarget(look, c.GetService(), c.GetPort())
	status, err := extAuthzStatus(c.GetStatusOnError())
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	grpc := &corev3.GrpcService{
		TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host}},
		Timeout:         extAuthzTimeout(c.GetTimeout()),
	}
	return &extAuthzProvider{
		http: &extauthzhttpv3.ExtAuthz{
			StatusOnError:         status,
			FailureModeAllow:      c.GetFailOpen(),
			Services:              &extauthzhttpv3.ExtAuthz_GrpcService{GrpcService: grpc},
			FilterEnabledMetadata: extAuthzEnabledMetadata(extAuthzHTTPRBACFilterName, name),
			TransportApiVersion:   corev3.ApiVersion_V3,
			WithRequestBody:       extAuthzBody(c.GetIncludeRequestBodyInCheck()),
		},
		tcp: &extauthztcpv3.ExtAuthz{
			StatPrefix:            extAuthzTCPStatPrefix,
			FailureModeAllow:      c.GetFailOpen(),
			TransportApiVersion:   corev3.ApiVersion_V3,
			GrpcService:           grpc,
			FilterEnabledMetadata: extAuthzEnabledMetadata(extAuthzTCPRBACFilterName, name),
		},
	}, nil
}

// extAuthzHeaders turns header names into case-insensitive matchers: a
// leading "*" is a suffix match, a trailing one a prefix match.
func extAuthzHeaders(headers []string) *matcherv3.ListStringMatcher {
	if len(headers) == 0 {
		return nil
	}
	out := &matcherv3.ListStringMatcher{}
	for _, h := range headers {
		m := &matcherv3.StringMatcher{IgnoreCase: true}
		if s, ok := strings.CutPrefix(h, "*"); ok {
			m.MatchPattern = &matcherv3.StringMatcher_Suffix{Suffix: s}
		} else if p, ok := strings.CutSuffix(h, "*"); ok {
			m.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: p}
		} else {
			m.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: h}
		}
		out.Patterns = append(out.Patterns, m)
	}
	return out
}

// extAuthzEnabledMetadata enables the ext_authz filter of provider only
// for requests the CUSTOM action's shadow RBAC filter matched with one of
// that provider's rules: its effective shadow policy id starts with
// istio-ext-authz-PROVIDER (istiod's generateFilterMatcherForProvider).
// The RBAC filters write their metadata under their canonical names,
// whatever the filter is named in the chain.
func extAuthzEnabledMetadata(rbacFilter, provider string) *matcherv3.MetadataMatcher {
	return &matcherv3.MetadataMatcher{
		Filter: rbacFilter,
		Path: []*matcherv3.MetadataMatcher_PathSegment{{
			Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: extAuthzShadowStatPrefix + shadowEffectivePolicyIDKey},
		}},
		Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{
			StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: extAuthzMatchPrefix + "-" + provider}},
		}},
	}
}

func extAuthzBody(b *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationRequestBody) *extauthzhttpv3.BufferSettings {
	if b == nil {
		return nil
	}
	return &extauthzhttpv3.BufferSettings{
		MaxRequestBytes:     b.GetMaxRequestBytes(),
		AllowPartialMessage: b.GetAllowPartialMessage(),
		PackAsBytes:         b.GetPackAsBytes(),
	}
}
