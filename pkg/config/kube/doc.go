// Package kube is the Kubernetes configuration source. It reads Services,
// EndpointSlices, Pods, Namespaces and Nodes (their topology labels), and Istio's networking.istio.io/v1
// and security.istio.io/v1 resources, from an API server through client-go
// informers and reports them to a config.Sink as model.Events.
//
// In: a *rest.Config (or clientsets). Out: batches of model.Events, one
// Sink.Apply per batch that the informers have queued since the last one.
//
// Istio kinds are optional: an Istio kind is watched only while its
// CustomResourceDefinition exists, is Established and serves v1. A CRD that
// appears later starts its kind's informer; a CRD that goes away removes its
// objects from the World. While the API server is unreachable the informers
// retry and nothing is deleted.
package kube
