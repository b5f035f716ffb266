package gen

import (
	"net/http"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
)

// Retries, as istiod's route/retry builds them. A route whose
// VirtualService sets no retries gets the MeshConfig's
// defaultHttpRetryPolicy, else Istio's default: 2 retries on
// connect-failure, refused-stream, unavailable, cancelled and
// retriable-status-codes, to another host than the one that failed
// (previous_hosts, 5 host selection attempts) unless the destination
// hashes requests to a host (consistent hash: retrying elsewhere would
// break the affinity). Attempts 0 turns retries off. Numbers in retryOn
// are retriable status codes. Inbound routes retry what was reset before
// the request reached the application, twice (not for gRPC: streams).

const defaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

var previousHosts = []*routev3.RetryPolicy_RetryHostPredicate{{
	Name:       "envoy.retry_host_predicates.previous_hosts",
	ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: mustAny(&previoushostsv3.PreviousHostsPredicate{})},
}}

// retryPolicy is the retry policy of a route: in, the VirtualService's
// (nil: the mesh's default, nil for Istio's), consistentHash whether its
// one destination hashes to a host.
func retryPolicy(in *networking.HTTPRetry, consistentHash bool) *routev3.RetryPolicy {
	out := &routev3.RetryPolicy{
		NumRetries:                    wrapperspb.UInt32(2),
		RetryOn:                       defaultRetryOn,
		HostSelectionRetryMaxAttempts: 5,
	}
	if !consistentHash {
		out.RetryHostPredicate = previousHosts
	}
	if in == nil {
		return out
	}
	if in.GetAttempts() <= 0 {
		return nil
	}
	out.NumRetries = wrapperspb.UInt32(uint32(in.GetAttempts()))
	if in.GetRetryOn() != "" {
		out.RetryOn, out.RetriableStatusCodes = parseRetryOn(in.GetRetryOn())
		if len(out.RetriableStatusCodes) > 0 && !strings.Contains(out.RetryOn, "retriable-status-codes") {
			out.RetryOn += ",retriable-status-codes"
		}
	}
	if d := in.GetPerTryTimeout(); d != nil {
		out.PerTryTimeout = durationpb.New(d.AsDuration())
	}
	if v := in.GetRetryIgnorePreviousHosts(); v != nil {
		out.RetryHostPredicate = nil
		if v.GetValue() {
			out.RetryHostPredicate = previousHosts
		}
	}
	if b := in.GetBackoff(); b != nil {
		out.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(b.AsDuration())}
	}
	return out
}

// parseRetryOn splits retryOn into Envoy's retry conditions and the HTTP
// status codes among them.
func parseRetryOn(retryOn string) (string, []uint32) {
	var conds []string
	var codes []uint32
	for _, part := range strings.Split(retryOn, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if i, err := strconv.Atoi(part); err == nil && http.StatusText(i) != "" {
			codes = append(codes, uint32(i))
			continue
		}
		conds = append(conds, part)
	}
	return strings.Join(conds, ","), codes
}

// meshRetry is the retry policy of w's MeshConfig for routes that set
// none (nil: Istio's default).
func meshRetry(w *view) *networking.HTTPRetry {
	return w.Mesh().Proto().GetDefaultHttpRetryPolicy()
}

// inboundRetry is the retry policy of an inbound route to an application
// port of protocol p.
func inboundRetry(p model.Protocol) *routev3.RetryPolicy {
	if p == model.ProtocolGRPC {
		return nil
	}
	return &routev3.RetryPolicy{RetryOn: "reset-before-request", NumRetries: wrapperspb.UInt32(2)}
}
