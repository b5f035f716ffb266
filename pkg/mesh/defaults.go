package mesh

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

// Istio's default values for the fields discovery reads, as
// istio.io/istio/pkg/config/mesh.DefaultMeshConfig sets them.
const (
	DefaultRootNamespace  = "istio-system"
	DefaultTrustDomain    = "cluster.local"
	DefaultConnectTimeout = 10 * time.Second
)

// DefaultProxyConfig is Istio's default ProxyConfig (the proxies'
// defaults before meshConfig.defaultConfig is applied).
func DefaultProxyConfig() *meshv1alpha1.ProxyConfig {
	return &meshv1alpha1.ProxyConfig{
		ConfigPath:               "./etc/istio/proxy",
		ClusterName:              &meshv1alpha1.ProxyConfig_ServiceCluster{ServiceCluster: "istio-proxy"},
		DrainDuration:            durationpb.New(45 * time.Second),
		TerminationDrainDuration: durationpb.New(5 * time.Second),
		ProxyAdminPort:           15000,
		ControlPlaneAuthPolicy:   meshv1alpha1.AuthenticationPolicy_MUTUAL_TLS,
		DiscoveryAddress:         "istiod.istio-system.svc:15012",
		BinaryPath:               "/usr/local/bin/envoy",
		StatNameLength:           189,
		StatusPort:               15020,
	}
}

// DefaultMeshConfig is Istio's default MeshConfig: what istiod serves with
// when no MeshConfig is given, and what a given one is applied over. Note
// that Istio's code sets no default metrics provider: Istio's Helm chart
// writes defaultProviders.metrics [prometheus] into the ConfigMap, and
// without it istiod configures no istio.stats filter. discovery keeps that
// rule (see the README).
func DefaultMeshConfig() *meshv1alpha1.MeshConfig {
	return &meshv1alpha1.MeshConfig{
		EnableTracing:            true,
		AccessLogEncoding:        meshv1alpha1.MeshConfig_TEXT,
		ProtocolDetectionTimeout: durationpb.New(0),
		IngressService:           "istio-ingressgateway",
		IngressControllerMode:    meshv1alpha1.MeshConfig_STRICT,
		IngressClass:             "istio",
		TrustDomain:              DefaultTrustDomain,
		TrustDomainAliases:       []string{},
		EnableAutoMtls:           wrapperspb.Bool(true),
		OutboundTrafficPolicy:    &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY},
		InboundTrafficPolicy:     &meshv1alpha1.MeshConfig_InboundTrafficPolicy{Mode: meshv1alpha1.MeshConfig_InboundTrafficPolicy_PASSTHROUGH},
		LocalityLbSetting:        &networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(true)},
		Certificates:             []*meshv1alpha1.Certificate{},
		DefaultConfig:            DefaultProxyConfig(),

		RootNamespace:                  DefaultRootNamespace,
		ProxyListenPort:                15001,
		ProxyInboundListenPort:         15006,
		ConnectTimeout:                 durationpb.New(DefaultConnectTimeout),
		DefaultServiceExportTo:         []string{"*"},
		DefaultVirtualServiceExportTo:  []string{"*"},
		DefaultDestinationRuleExportTo: []string{"*"},
		DnsRefreshRate:                 durationpb.New(60 * time.Second),
		ServiceSettings:                []*meshv1alpha1.MeshConfig_ServiceSettings{},

		EnablePrometheusMerge: wrapperspb.Bool(true),
		DefaultProviders:      &meshv1alpha1.MeshConfig_DefaultProviders{},
		ExtensionProviders: []*meshv1alpha1.MeshConfig_ExtensionProvider{
			{
				Name: "prometheus",
				Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Prometheus{
					Prometheus: &meshv1alpha1.MeshConfig_ExtensionProvider_PrometheusMetricsProvider{},
				},
			},
			{
				Name: "stackdriver",
				Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_Stackdriver{
					Stackdriver: &meshv1alpha1.MeshConfig_ExtensionProvider_StackdriverProvider{},
				},
			},
			{
				Name: "envoy",
				Provider: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLog{
					EnvoyFileAccessLog: &meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyFileAccessLogProvider{Path: "/dev/stdout"},
				},
			},
		},
	}
}
