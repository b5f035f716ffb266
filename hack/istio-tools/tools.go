//go:build tools

// Package tools pins istio.io/istio so that hack/istio-agent.sh and
// hack/istioctl.sh can build Istio's own data plane agent, pilot-agent,
// and its CLI, istioctl, for the compatibility tests in test/compat and
// hack/istioctl-compat. It lives in its own module so that istio.io/istio
// never enters the product's dependency graph.
package tools

import (
	_ "istio.io/istio/istioctl/cmd/istioctl"
	_ "istio.io/istio/pilot/cmd/pilot-agent"
)
