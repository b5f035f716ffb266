package validate

import (
	"errors"
	"strings"
	"testing"
)

const telHead = "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: t, namespace: istio-system}\n"

// Telemetry is judged as istiod's ValidateTelemetry judges it.
func TestValidateTelemetry(t *testing.T) {
	cases := map[string]struct {
		doc     string
		problem string // "" means valid
		warning string
	}{
		"accepts mesh-wide metrics and access logs with a CEL filter": {
			doc: telHead + `spec:
  metrics:
  - providers: [{name: prometheus}]
    overrides:
    - match: {metric: REQUEST_COUNT, mode: CLIENT}
      tagOverrides:
        request_protocol: {operation: UPSERT, value: request.protocol}
        destination_canonical_revision: {operation: REMOVE}
  accessLogging:
  - providers: [{name: envoy}]
    filter: {expression: "response.code >= 400"}`,
		},
		"refuses an access log filter that is not CEL": {
			doc:     telHead + "spec:\n  accessLogging:\n  - filter: {expression: \"response.code >=\"}",
			problem: "must be a valid CEL expression",
		},
		"refuses a provider without a name": {
			doc:     telHead + "spec:\n  metrics:\n  - providers: [{name: \"\"}]",
			problem: "providers.name may not be empty",
		},
		"refuses an UPSERT without a value": {
			doc:     telHead + "spec:\n  metrics:\n  - overrides:\n    - tagOverrides: {x: {operation: UPSERT}}",
			problem: "tagOverrides.value must be set when operation is UPSERT",
		},
		"refuses a REMOVE with a value": {
			doc:     telHead + "spec:\n  metrics:\n  - overrides:\n    - tagOverrides: {x: {operation: REMOVE, value: v}}",
			problem: "tagOverrides.value may only be set when operation is UPSERT",
		},
		"refuses both a selector and targetRefs": {
			doc:     telHead + "spec:\n  selector: {matchLabels: {app: a}}\n  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: gw}]",
			problem: "only one of targetRefs or selector can be set",
		},
		"refuses a sampling percentage over 100": {
			doc:     telHead + "spec:\n  tracing:\n  - randomSamplingPercentage: 101",
			problem: "randomSamplingPercentage must be in range",
		},
		"warns of several tracing blocks, and that discovery does not configure tracing": {
			doc:     telHead + "spec:\n  tracing:\n  - providers: [{name: zipkin}]\n  - providers: [{name: zipkin}]",
			warning: "multiple tracing is not currently supported",
		},
		"refuses a Go duration that is not one": {
			doc:     telHead + "spec:\n  metrics:\n  - reportingInterval: soon",
			problem: "bad Duration",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gk, raw := gkOf(t, tc.doc)
			warnings, err := Validate(gk, raw)
			if tc.problem == "" && err != nil {
				t.Fatalf("valid object refused: %v", err)
			}
			if tc.problem != "" {
				var ie *InvalidError
				var de *DecodeError
				if err == nil || !(errors.As(err, &ie) || errors.As(err, &de)) || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("err = %v, want one containing %q", err, tc.problem)
				}
			}
			if tc.warning != "" && !strings.Contains(strings.Join(warnings, "\n"), tc.warning) {
				t.Fatalf("warnings = %q, want one containing %q", warnings, tc.warning)
			}
			if strings.Contains(name, "discovery does not configure tracing") && !strings.Contains(strings.Join(warnings, "\n"), "spec.tracing") {
				t.Fatalf("warnings = %q, want the unsupported tracing", warnings)
			}
		})
	}
}
