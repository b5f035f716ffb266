// Package model holds the control plane's view of the mesh.
//
// In: typed Events from the config sources (pkg/config/kube and
// pkg/config/file), each a Kubernetes or Istio object keyed by kind,
// namespace and name.
//
// Out: an immutable World, rebuilt incrementally by the Store and published
// atomically, together with the list of Changes that produced it, so the
// push pipeline can decide which proxies need which configuration.
package model
