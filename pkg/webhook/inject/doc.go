// Package inject adds Istio's sidecar (or gateway, or proxyless gRPC agent)
// to Pods as they are created.
//
// In: a Pod from an AdmissionReview (Pod CREATE), its Namespace, and the
// injection configuration of the istio-sidecar-injector ConfigMap (key
// "config": policy, selectors and Go templates; key "values": Helm-style
// values); with a cluster, the MeshConfig and the ProxyConfig resources in
// force (Env), merged into the proxy's configuration with the pod's
// proxy.istio.io/config as istiod merges them (proxyconfig.go).
//
// Out: the decision (inject or skip, with the reason) and, when injecting,
// the injected Pod, plus an RFC 6902 JSON patch that only adds to what the
// user wrote. Inject is a pure function; Handler wraps it for /inject and
// Watcher keeps the configuration current from the ConfigMap.
//
// Revision tags (tags.go, revtag.go): a tag is Istio's
// MutatingWebhookConfiguration istio-revision-tag-<tag>, labelled
// istio.io/tag and istio.io/rev, that sends pods whose namespace or own
// istio.io/rev names the tag to the revision's injector. The injector
// follows the tags that point at its revision (Selection) and injects
// their pods, as istiod does; SetTag, ListTags and RemoveTag make and
// remove tags as istioctl tag does (`discovery tag`).
package inject
