// Package gatewaydeploy is the Gateway API's automated deployment, as
// istiod's deployment controller (pilot/pkg/config/kube/gatewaycommon,
// template kube-gateway): for each Gateway of Istio's class in managed
// mode (no spec.addresses, or a single IP), the leader creates and keeps a
// ServiceAccount, a Deployment and a Service named <gateway>-<class>.
//
// In: Gateways and GatewayClasses, the objects already made (informers
// filtered by gateway.istio.io/managed), the ConfigMap a Gateway's
// spec.infrastructure.parametersRef names, and the injector's gateway
// template (PodRenderer) for the proxy's pod. Out: the objects, applied
// with server-side apply (field manager istio.io/gateway-controller),
// each with an owner reference to its Gateway; and, for the status
// writer (pkg/status, GatewayInfraSource), the Gateway's addresses and its
// Programmed condition from the Service and the Deployment.
//
// The pods carry gateway.networking.k8s.io/gateway-name: <gateway>, which
// the translation (pkg/model/gatewayapi) selects as the Gateway's
// proxies; they run pilot-agent "proxy router" connected to discovery's
// 15012 as the injector's gateway template sets it.
//
// Chosen differently from DESIGN.md (only pkg/config/kube watches): the
// controller has its own informers, on the leader only, because the
// World carries neither Deployments and ServiceAccounts nor a Service's
// load balancer status; they are filtered by the managed label, so they
// hold only what the controller made.
//
// Chosen differently from istiod: no HorizontalPodAutoscaler or
// PodDisruptionBudget; the old istio.io/gateway-name selector label (gone
// since Istio 1.24) is not kept; no ambient labels
// (istio.io/dataplane-mode); the GatewayClass defaults ConfigMap
// (gateway.istio.io/defaults-for-class) is not read; the
// controller-version annotation is read but not written; the parameters
// ConfigMap is read at reconciliation, not watched (a change to it is
// seen at the Gateway's next change). A deleted Gateway's objects are
// also deleted by the controller, not only by the garbage collector.
package gatewaydeploy
