// Package compat holds compatibility tests of discovery against Istio's own
// data plane agent, pilot-agent, built from istio.io/istio by
// hack/istio-agent.sh. They run the real `discovery serve` binary against a
// real kube-apiserver (internal/testenv) and pilot-agent as a child process
// in proxyless gRPC mode (DISABLE_ENVOY=true, GENERATOR=grpc): pilot-agent
// gets its workload certificate from discovery's CA and proxies a grpc-go
// xDS client's requests to discovery, unchanged.
//
// Run them with:
//
//	eval "$(hack/testenv.sh)"; eval "$(hack/istio-agent.sh)"
//	COMPAT_REQUIRED=1 TESTENV_REQUIRED=1 go test ./test/compat/
//
// Without a pilot-agent binary (COMPAT_PILOT_AGENT, else .cache/bin), or
// with -short, the tests skip with the reason, unless COMPAT_REQUIRED or CI
// is set, when they fail.
package compat
