package mesh

import (
	"errors"
	"strings"
	"testing"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
)

func TestParse(t *testing.T) {
	tests := map[string]struct {
		yaml  string
		check func(t *testing.T, c *Config)
	}{
		"gives Istio's defaults for an empty text": {
			yaml: "",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if c.RootNamespace() != "istio-system" || c.TrustDomain() != "cluster.local" || !c.AutoMTLS() ||
					c.RegistryOnly() || c.ConnectTimeout() != 10*time.Second || c.Hash() != Default().Hash() {
					t.Errorf("defaults: %v", c.Proto())
				}
				if len(c.Proto().GetExtensionProviders()) != 3 {
					t.Errorf("default providers: %v", c.Proto().GetExtensionProviders())
				}
			},
		},
		"reads Go durations as istiod's decoder does": {
			yaml: "connectTimeout: 3m\nprotocolDetectionTimeout: 500ms\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if c.ConnectTimeout() != 3*time.Minute || c.ProtocolDetectionTimeout() != 500*time.Millisecond {
					t.Errorf("got %v, %v", c.ConnectTimeout(), c.ProtocolDetectionTimeout())
				}
			},
		},
		"replaces a nested message whole, as Istio does": {
			yaml: "localityLbSetting:\n  failover:\n  - from: us-east\n    to: us-west\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if c.LocalityLB().GetEnabled() != nil {
					t.Errorf("enabled kept from the default: %v", c.LocalityLB())
				}
			},
		},
		"applies defaultConfig over Istio's default ProxyConfig": {
			yaml: "defaultConfig:\n  proxyMetadata:\n    ISTIO_META_DNS_CAPTURE: \"true\"\n  holdApplicationUntilProxyStarts: true\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				pc := c.ProxyConfig()
				if pc.GetDiscoveryAddress() != "istiod.istio-system.svc:15012" || pc.GetProxyMetadata()["ISTIO_META_DNS_CAPTURE"] != "true" ||
					!pc.GetHoldApplicationUntilProxyStarts().GetValue() || pc.GetStatusPort() != 15020 {
					t.Errorf("proxy config: %v", pc)
				}
			},
		},
		"merges extension providers by name into Istio's": {
			yaml: "extensionProviders:\n- name: envoy\n  envoyFileAccessLog:\n    path: /dev/stderr\n- name: otel\n  opentelemetry:\n    service: otel.observability.svc.cluster.local\n    port: 4317\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				var names []string
				for _, p := range c.Proto().GetExtensionProviders() {
					names = append(names, p.GetName())
				}
				if strings.Join(names, ",") != "prometheus,stackdriver,envoy,otel" {
					t.Errorf("providers %v", names)
				}
				if got := c.Provider("ENVOY").GetEnvoyFileAccessLog().GetPath(); got != "/dev/stderr" {
					t.Errorf("envoy provider path %q", got)
				}
			},
		},
		"sorts and deduplicates trust domain aliases": {
			yaml: "trustDomainAliases: [old.example, a.example, old.example]\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if got := strings.Join(c.TrustDomainAliases(), ","); got != "a.example,old.example" {
					t.Errorf("aliases %s", got)
				}
			},
		},
		"reads an empty outboundTrafficPolicy as REGISTRY_ONLY, the enum's zero value, as Istio does": {
			yaml: "outboundTrafficPolicy: {}\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if !c.RegistryOnly() {
					t.Error("not REGISTRY_ONLY")
				}
			},
		},
		"reads an explicit false": {
			yaml: "enableAutoMtls: false\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if c.AutoMTLS() {
					t.Error("auto mTLS still on")
				}
			},
		},
		"drops unknown fields, as istiod does, and reports them": {
			yaml: "rootNamespace: mesh-root\naccessLogFile: /dev/stdout\nnotAField: 1\ndefaultConfig:\n  alsoNot: x\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if c.RootNamespace() != "mesh-root" {
					t.Errorf("root namespace %q", c.RootNamespace())
				}
				got := paths(c.Ignored())
				if got != "defaultConfig.alsoNot,notAField" {
					t.Errorf("ignored %s", got)
				}
			},
		},
		"reports fields set that discovery does not apply, and not those it applies": {
			yaml: "ingressClass: nginx\nenablePrometheusMerge: true\noutboundTrafficPolicy:\n  mode: REGISTRY_ONLY\nrootNamespace: istio-system\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if got := paths(c.Ignored()); got != "enablePrometheusMerge,ingressClass" {
					t.Errorf("ignored %s", got)
				}
			},
		},
		"reports extension providers of a type discovery cannot configure": {
			yaml: "extensionProviders:\n- name: zipkin\n  zipkin:\n    service: zipkin.istio-system.svc.cluster.local\n    port: 9411\n- name: ls\n  lightstep: {service: ls.observability.svc.cluster.local, port: 8080}\n- name: prom2\n  prometheus: {}\n- name: als\n  envoyHttpAls: {service: als.observability.svc.cluster.local, port: 9000}\n- name: authz\n  envoyExtAuthzHttp: {service: authz.foo.svc.cluster.local, port: 8000}\n- name: authz-grpc\n  envoyExtAuthzGrpc: {service: authz.foo.svc.cluster.local, port: 9000}\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if got := paths(c.Ignored()); got != "extensionProviders[ls]" {
					t.Errorf("ignored %s", got)
				}
			},
		},
		"applies enableTracing and tracing providers, reports what of them is not applied": {
			yaml: "enableTracing: false\ndefaultProviders: {tracing: [otel, zipkin]}\nextensionProviders:\n- name: otel\n  opentelemetry:\n    service: otel.observability.svc.cluster.local\n    port: 4317\n    grpc:\n      initialMetadata: [{name: x-token, envName: TOKEN}]\n- name: zipkin\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if got := paths(c.Ignored()); got != "defaultProviders.tracing,extensionProviders[otel]" {
					t.Errorf("ignored %s", got)
				}
			},
		},
		"takes snake_case names as jsonpb does": {
			yaml: "root_namespace: other\n",
			check: func(t *testing.T, c *Config) {
				t.Helper()
				if c.RootNamespace() != "other" || len(c.Ignored()) != 0 {
					t.Errorf("root %q, ignored %v", c.RootNamespace(), c.Ignored())
				}
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse(tt.yaml)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := map[string]struct{ yaml, want string }{
		"text that is not YAML":                  {"a: [", "not YAML"},
		"a list instead of fields":               {"- a\n", "must be an object"},
		"a connect timeout below 1ms":            {"connectTimeout: 0s\n", "invalid connect timeout"},
		"a connect timeout over an hour":         {"connectTimeout: 2h\n", "invalid connect timeout"},
		"a duration that is not one":             {"connectTimeout: soon\n", "bad Duration"},
		"a wrong type":                           {"rootNamespace: [a]\n", "rootNamespace"},
		"an unknown enum value":                  {"outboundTrafficPolicy:\n  mode: SOMETIMES\n", "SOMETIMES"},
		"a discovery address without a port":     {"defaultConfig:\n  discoveryAddress: istiod.istio-system.svc\n", "invalid discovery address"},
		"a drain duration with a fraction":       {"defaultConfig:\n  drainDuration: 1500ms\n", "seconds precision"},
		"an invalid trust domain":                {"trustDomain: Not_Valid\n", "trustDomain"},
		"an invalid trust domain alias":          {"trustDomainAliases: [ok.example, -bad]\n", "trustDomainAliases[0], domain `-bad`"},
		"locality weights that do not add up":    {"localityLbSetting:\n  distribute:\n  - from: a/*\n    to:\n      b/*: 50\n", "!= 100"},
		"both distribute and failover":           {"localityLbSetting:\n  distribute:\n  - from: a/*\n    to: {b/*: 100}\n  failover:\n  - from: a\n    to: b\n", "simultaneously"},
		"a proxy listen port out of range":       {"proxyListenPort: 70000\n", "proxy listen port"},
		"a protocol detection timeout below 1ms": {"protocolDetectionTimeout: 100us\n", "protocol detection timeout"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tt.yaml)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an ErrInvalid containing %q", err, tt.want)
			}
		})
	}
}

func TestHashFollowsContent(t *testing.T) {
	a, _ := Parse("accessLogFile: /dev/stdout\n")
	b, _ := Parse("{\"accessLogFile\": \"/dev/stdout\"}")
	c, _ := Parse("accessLogFile: /dev/stderr\n")
	if a.Hash() != b.Hash() || a.Hash() == c.Hash() {
		t.Errorf("hashes %s %s %s", a.Hash(), b.Hash(), c.Hash())
	}
	if a.Proto().GetAccessLogEncoding() != meshv1alpha1.MeshConfig_TEXT {
		t.Error("encoding")
	}
}

func paths(fs []Field) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Path)
	}
	return strings.Join(out, ",")
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "connectTimeout: 3m\n", "defaultConfig:\n  proxyMetadata: {A: b}\n", "extensionProviders: [{name: x, prometheus: {}}]", "a: ["} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, err := Parse(text)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			return
		}
		// What is accepted has the fields generation relies on.
		if c.Proto().GetDefaultConfig() == nil || c.RootNamespace() == "" || c.Hash() == "" {
			t.Fatalf("accepted without defaults: %v", c.Proto())
		}
	})
}
