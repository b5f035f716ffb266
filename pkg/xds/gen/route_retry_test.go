package gen

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
)

func TestRetryPolicyAsIstiod(t *testing.T) {
	tests := map[string]struct {
		in             *networking.HTTPRetry
		consistentHash bool
		none           bool
		retries        uint32
		on             string
		codes          []uint32
		otherHost      bool
		perTry         time.Duration
	}{
		"no retries set: Istio's default, to other hosts": {
			retries: 2, on: defaultRetryOn, otherHost: true,
		},
		"a consistent hash keeps retries on the same host": {
			consistentHash: true, retries: 2, on: defaultRetryOn,
		},
		"attempts 0 turns retries off": {
			in: &networking.HTTPRetry{Attempts: 0, RetryOn: "5xx"}, none: true,
		},
		"status codes in retryOn are retriable status codes": {
			in:      &networking.HTTPRetry{Attempts: 4, RetryOn: "gateway-error, 503,connect-failure", PerTryTimeout: durationpb.New(500 * time.Millisecond)},
			retries: 4, on: "gateway-error,connect-failure,retriable-status-codes", codes: []uint32{503}, otherHost: true, perTry: 500 * time.Millisecond,
		},
		"retryIgnorePreviousHosts false retries on any host": {
			in:      &networking.HTTPRetry{Attempts: 3, RetryIgnorePreviousHosts: wrapperspb.Bool(false)},
			retries: 3, on: defaultRetryOn,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rp := retryPolicy(tc.in, tc.consistentHash)
			if tc.none {
				if rp != nil {
					t.Fatalf("retry policy %v, want none", rp)
				}
				return
			}
			if rp.GetNumRetries().GetValue() != tc.retries || rp.GetRetryOn() != tc.on || !slices.Equal(rp.GetRetriableStatusCodes(), tc.codes) {
				t.Errorf("retries %d on %q codes %v, want %d on %q codes %v", rp.GetNumRetries().GetValue(), rp.GetRetryOn(), rp.GetRetriableStatusCodes(), tc.retries, tc.on, tc.codes)
			}
			if got := len(rp.GetRetryHostPredicate()) == 1; got != tc.otherHost {
				t.Errorf("previous_hosts predicate %v, want %v", got, tc.otherHost)
			}
			if rp.GetHostSelectionRetryMaxAttempts() != 5 {
				t.Errorf("host selection attempts %d, want 5", rp.GetHostSelectionRetryMaxAttempts())
			}
			if got := rp.GetPerTryTimeout().AsDuration(); rp.GetPerTryTimeout() != nil && got != tc.perTry || rp.GetPerTryTimeout() == nil && tc.perTry != 0 {
				t.Errorf("per try timeout %v, want %v", got, tc.perTry)
			}
		})
	}
	if inboundRetry(model.ProtocolGRPC) != nil {
		t.Error("inbound gRPC routes retry; they must not (streams)")
	}
	if r := inboundRetry(model.ProtocolHTTP); r.GetRetryOn() != "reset-before-request" || r.GetNumRetries().GetValue() != 2 {
		t.Errorf("inbound HTTP retry %v, want 2 on reset-before-request", r)
	}
}
