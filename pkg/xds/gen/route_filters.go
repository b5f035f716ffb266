package gen

import (
	"strconv"
	"strings"

	commonfaultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// HTTP filter names; routes configure them in typed_per_filter_config.
const (
	FaultFilter = "envoy.filters.http.fault"
	CorsFilter  = "envoy.filters.http.cors"
)

func faultFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: FaultFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&faultv3.HTTPFault{})}}
}

func corsFilter() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: CorsFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&corsv3.Cors{})}}
}

// perFilterConfig is a route's fault injection and, for Envoy, its CORS
// policy.
func perFilterConfig(hr *networking.HTTPRoute, envoy bool) map[string]*anypb.Any {
	out := map[string]*anypb.Any{}
	if f := fault(hr.GetFault()); f != nil {
		out[FaultFilter] = mustAny(f)
	}
	if envoy {
		if c := cors(hr.GetCorsPolicy()); c != nil {
			out[CorsFilter] = mustAny(c)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// fraction is a percentage (0-100, with decimals) as a fraction of a
// million, as Istio writes it.
func fraction(pct float64) *typev3.FractionalPercent {
	pct = min(max(pct, 0), 100)
	return &typev3.FractionalPercent{Numerator: uint32(pct * 10000), Denominator: typev3.FractionalPercent_MILLION}
}

func fault(f *networking.HTTPFaultInjection) *faultv3.HTTPFault {
	if f == nil || (f.GetDelay() == nil && f.GetAbort() == nil) {
		return nil
	}
	out := &faultv3.HTTPFault{}
	if d := f.GetDelay(); d != nil && d.GetFixedDelay() != nil {
		pct := float64(d.GetPercent())
		if d.GetPercentage() != nil {
			pct = d.GetPercentage().GetValue()
		} else if d.GetPercent() == 0 {
			pct = 100
		}
		out.Delay = &commonfaultv3.FaultDelay{
			FaultDelaySecifier: &commonfaultv3.FaultDelay_FixedDelay{FixedDelay: durationpb.New(d.GetFixedDelay().AsDuration())},
			Percentage:         fraction(pct),
		}
	}
	if a := f.GetAbort(); a != nil {
		pct := 100.0
		if a.GetPercentage() != nil {
			pct = a.GetPercentage().GetValue()
		}
		ab := &faultv3.FaultAbort{Percentage: fraction(pct)}
		switch e := a.GetErrorType().(type) {
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			ab.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			code, ok := grpcCode(e.GrpcStatus)
			if !ok {
				return out
			}
			ab.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: code}
		default:
			return out
		}
		out.Abort = ab
	}
	if out.Delay == nil && out.Abort == nil {
		return nil
	}
	return out
}

// grpcCode parses a gRPC status as Istio takes it: a name such as
// UNAVAILABLE or a number.
func grpcCode(s string) (uint32, bool) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n <= 16 {
		return uint32(n), true
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(strings.ToUpper(s)))); err != nil {
		return 0, false
	}
	return uint32(c), true
}

func cors(c *networking.CorsPolicy) *corsv3.CorsPolicy {
	if c == nil {
		return nil
	}
	out := &corsv3.CorsPolicy{
		AllowMethods:  strings.Join(c.GetAllowMethods(), ","),
		AllowHeaders:  strings.Join(c.GetAllowHeaders(), ","),
		ExposeHeaders: strings.Join(c.GetExposeHeaders(), ","),
	}
	if d := c.GetMaxAge(); d != nil {
		out.MaxAge = strconv.FormatInt(int64(d.AsDuration().Seconds()), 10)
	}
	if b := c.GetAllowCredentials(); b != nil {
		out.AllowCredentials = wrapperspb.Bool(b.GetValue())
	}
	for _, o := range c.GetAllowOrigin() {
		out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: o}})
	}
	for _, o := range c.GetAllowOrigins() {
		if m := stringMatcher(o); m != nil {
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, m)
		}
	}
	return out
}
