// Package mesh reads Istio's MeshConfig as istiod does.
//
// In: the text of a MeshConfig (the "mesh" key of the istio ConfigMap, or
// a --mesh-config file): YAML or JSON.
//
// Out: an immutable *Config: Istio's defaults with the text applied by
// Istio's rules (every top-level field given replaces the default;
// defaultConfig is applied over Istio's default ProxyConfig;
// extensionProviders are merged by name with Istio's default providers;
// trustDomainAliases are sorted and deduplicated), checked as istiod's
// validation checks it, and the list of fields that were set but that
// discovery does not apply (Ignored), so that none is ignored silently.
//
// The package has no state and starts nothing; pkg/config/mesh watches
// the sources and keeps the last good Config in force.
package mesh
