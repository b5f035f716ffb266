// Package istioctlcompat tests that Istio's own istioctl works against
// discovery: analyze, x precheck, tag list and set, proxy-status and
// version, on a real kube-apiserver (internal/testenv) where discovery was
// installed with `discovery bootstrap` and runs as `discovery serve`, with
// a real pilot-agent proxying a grpc-go xDS client as the proxy to show.
//
// The test cluster runs no kubelet and no controllers. The tests create
// what they would: the discovery Pod of the installed Deployment (Running,
// Ready, on a Node), and a kubelet stand-in that answers the API server's
// port-forward requests for that Pod by connecting to the local discovery
// process, as istioctl reaches istiod through `kubectl port-forward`.
//
// Run them with:
//
//	eval "$(hack/testenv.sh)"; eval "$(hack/istio-agent.sh)"; eval "$(hack/istioctl.sh)"
//	cd hack/istioctl-compat && COMPAT_REQUIRED=1 TESTENV_REQUIRED=1 go test ./...
//
// Without istioctl (COMPAT_ISTIOCTL) or pilot-agent (COMPAT_PILOT_AGENT),
// or with -short, the tests skip with the reason unless COMPAT_REQUIRED or
// CI is set.
package istioctlcompat
