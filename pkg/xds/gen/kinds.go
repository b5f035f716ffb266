package gen

import "github.com/meshplane/discovery/pkg/model"

// ReadsKind reports whether discovery acts on objects of kind at all. For
// a kind it reads, UnsupportedFields names the fields it ignores; an Istio
// kind it does not read (TrafficExtension, ... today) has no effect on any
// proxy, whatever it says.
func ReadsKind(kind model.Kind) bool {
	_, ok := supportedFields[kind]
	return ok
}

// proxyConfigFields are the ProxyConfig fields discovery applies. Not
// generation but the sidecar injector reads ProxyConfig, as istiod's
// does (pkg/webhook/inject/proxyconfig.go): concurrency and
// environmentVariables reach the proxy through PROXY_CONFIG and its
// environment, image.imageType its image tag. That is every field of the
// kind; as in Istio, a ProxyConfig changes a proxy when its pod is
// (re)created, and nothing is pushed to running proxies.
var proxyConfigFields = newFieldSet("selector", "concurrency", "environmentVariables", "image")
