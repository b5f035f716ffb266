package mesh

import (
	"slices"
	"strings"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// Config is one MeshConfig as discovery applies it. It is immutable: the
// MeshConfig it holds must not be changed, and a changed MeshConfig is a
// new Config.
type Config struct {
	mc       *meshv1alpha1.MeshConfig
	hash     string
	ignored  []Field
	warnings []string
}

// Field is a MeshConfig field the text set that discovery does not act on.
type Field struct {
	// Path is the field's JSON path (defaultProviders.tracing,
	// extensionProviders[zipkin]).
	Path string `json:"path"`
	// Reason says why it changes nothing, or what it would need.
	Reason string `json:"reason"`
	// Unknown is set for a field MeshConfig does not have (istiod drops
	// those too).
	Unknown bool `json:"unknown,omitempty"`
}

var defaultConfig = newConfig(DefaultMeshConfig(), nil, nil)

// Default is Istio's default MeshConfig, as one shared Config.
func Default() *Config { return defaultConfig }

// Proto is the MeshConfig in full, Istio's defaults included. Callers must
// not change it.
func (c *Config) Proto() *meshv1alpha1.MeshConfig { return c.mc }

// Hash identifies the MeshConfig's content: two Configs with the same hash
// configure the same.
func (c *Config) Hash() string { return c.hash }

// Ignored lists the fields set that discovery does not apply, by path.
func (c *Config) Ignored() []Field { return slices.Clone(c.ignored) }

// Warnings are what Istio's validation warns about the MeshConfig.
func (c *Config) Warnings() []string { return slices.Clone(c.warnings) }

// RootNamespace is where mesh-wide Istio configuration lives (Sidecar,
// PeerAuthentication, AuthorizationPolicy, DestinationRule and Telemetry
// defaults).
func (c *Config) RootNamespace() string {
	if ns := c.mc.GetRootNamespace(); ns != "" {
		return ns
	}
	return DefaultRootNamespace
}

// TrustDomain is the MeshConfig's trustDomain.
func (c *Config) TrustDomain() string {
	if td := c.mc.GetTrustDomain(); td != "" {
		return td
	}
	return DefaultTrustDomain
}

// TrustDomainAliases are the trust domains whose identities count as the
// mesh's own, sorted.
func (c *Config) TrustDomainAliases() []string { return c.mc.GetTrustDomainAliases() }

// RegistryOnly reports whether outbound traffic to destinations the mesh
// does not know is blocked (outboundTrafficPolicy.mode REGISTRY_ONLY) for
// sidecars whose Sidecar resource says nothing.
func (c *Config) RegistryOnly() bool {
	return c.mc.GetOutboundTrafficPolicy().GetMode() == meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY
}

// AutoMTLS reports whether clients pick mTLS by themselves for
// destinations in the mesh when no DestinationRule sets TLS
// (enableAutoMtls, true unless set false).
func (c *Config) AutoMTLS() bool {
	if b := c.mc.GetEnableAutoMtls(); b != nil {
		return b.GetValue()
	}
	return true
}

// ConnectTimeout is the clusters' connect timeout.
func (c *Config) ConnectTimeout() time.Duration {
	if d := c.mc.GetConnectTimeout(); d != nil {
		return d.AsDuration()
	}
	return DefaultConnectTimeout
}

// ProtocolDetectionTimeout is how long a sidecar waits for a sniffed
// connection's first bytes; 0 waits for ever (Istio's default).
func (c *Config) ProtocolDetectionTimeout() time.Duration {
	return c.mc.GetProtocolDetectionTimeout().AsDuration()
}

// ServiceExportTo, VirtualServiceExportTo and DestinationRuleExportTo are
// the exportTo of objects of those kinds that set none.
func (c *Config) ServiceExportTo() []string { return c.mc.GetDefaultServiceExportTo() }

// VirtualServiceExportTo is the exportTo of VirtualServices that set none.
func (c *Config) VirtualServiceExportTo() []string { return c.mc.GetDefaultVirtualServiceExportTo() }

// DestinationRuleExportTo is the exportTo of DestinationRules that set none.
func (c *Config) DestinationRuleExportTo() []string { return c.mc.GetDefaultDestinationRuleExportTo() }

// InboundLocalhost reports whether inbound traffic goes to the application
// on localhost (inboundTrafficPolicy.mode LOCALHOST) rather than to the
// address it was sent to (PASSTHROUGH, the default).
func (c *Config) InboundLocalhost() bool {
	return c.mc.GetInboundTrafficPolicy().GetMode() == meshv1alpha1.MeshConfig_InboundTrafficPolicy_LOCALHOST
}

// H2Upgrade reports whether HTTP/1.1 connections to services in the mesh
// are upgraded to HTTP/2 unless a DestinationRule says otherwise
// (h2UpgradePolicy UPGRADE).
func (c *Config) H2Upgrade() bool {
	return c.mc.GetH2UpgradePolicy() == meshv1alpha1.MeshConfig_UPGRADE
}

// LocalityLB is the mesh-wide locality load balancing setting.
func (c *Config) LocalityLB() *networking.LocalityLoadBalancerSetting {
	return c.mc.GetLocalityLbSetting()
}

// AccessLog is the legacy access log of every proxy: accessLogFile (empty:
// none), accessLogFormat (empty: Istio's default) and whether it is JSON.
func (c *Config) AccessLog() (file, format string, json bool) {
	return c.mc.GetAccessLogFile(), c.mc.GetAccessLogFormat(), c.mc.GetAccessLogEncoding() == meshv1alpha1.MeshConfig_JSON
}

// Provider returns the extension provider named name (compared as Istio
// does, without case), or nil.
func (c *Config) Provider(name string) *meshv1alpha1.MeshConfig_ExtensionProvider {
	for _, p := range c.mc.GetExtensionProviders() {
		if strings.EqualFold(p.GetName(), name) {
			return p
		}
	}
	return nil
}

// DefaultProviders are the providers used where no Telemetry names one.
func (c *Config) DefaultProviders() *meshv1alpha1.MeshConfig_DefaultProviders {
	return c.mc.GetDefaultProviders()
}

// ProxyConfig is the proxies' default configuration (defaultConfig over
// Istio's defaults).
func (c *Config) ProxyConfig() *meshv1alpha1.ProxyConfig { return c.mc.GetDefaultConfig() }
