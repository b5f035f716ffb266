package inject

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	meshconfig "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshplane/discovery/pkg/mesh"
)

// TestInjectWithMeshConfig checks that the MeshConfig's defaultConfig is
// the injected proxy's configuration, as istiod's injector takes it, with
// the pod's proxy.istio.io/config on top.
func TestInjectWithMeshConfig(t *testing.T) {
	cfg, values := defaults(t)
	mc, err := mesh.Parse(`defaultConfig:
  discoveryAddress: discovery.mesh-system.svc:15012
  holdApplicationUntilProxyStarts: true
  proxyMetadata:
    ISTIO_META_DNS_CAPTURE: "true"
`)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		annotation string
		check      func(t *testing.T, pc *meshconfig.ProxyConfig, pod *corev1.Pod)
	}{
		"takes defaultConfig over Istio's defaults": {
			check: func(t *testing.T, pc *meshconfig.ProxyConfig, pod *corev1.Pod) {
				t.Helper()
				if pc.GetDiscoveryAddress() != "discovery.mesh-system.svc:15012" || pc.GetProxyMetadata()["ISTIO_META_DNS_CAPTURE"] != "true" ||
					pc.GetStatusPort() != 15020 || pc.GetDrainDuration().AsDuration().Seconds() != 45 {
					t.Errorf("proxy config %v", pc)
				}
				if pod.Spec.Containers[0].Name != ProxyContainerName {
					t.Errorf("holdApplicationUntilProxyStarts: first container %q", pod.Spec.Containers[0].Name)
				}
			},
		},
		"lets the pod's proxy.istio.io/config win": {
			annotation: "discoveryAddress: other.example:15012\n",
			check: func(t *testing.T, pc *meshconfig.ProxyConfig, _ *corev1.Pod) {
				t.Helper()
				if pc.GetDiscoveryAddress() != "other.example:15012" || pc.GetProxyMetadata()["ISTIO_META_DNS_CAPTURE"] != "true" {
					t.Errorf("proxy config %v", pc)
				}
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			pod := readPod(t, "testdata/inject/basic.yaml")
			if tt.annotation != "" {
				if pod.Annotations == nil {
					pod.Annotations = map[string]string{}
				}
				pod.Annotations["proxy.istio.io/config"] = tt.annotation
			}
			out, _, err := InjectWith(pod, injectionNamespace(), cfg, values, RevisionSelection(""), Env{Mesh: mc.Proto()})
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, injectedProxyConfig(t, out), out)
			if mc.Proto().GetDefaultConfig().GetDiscoveryAddress() != "discovery.mesh-system.svc:15012" {
				t.Fatal("injection changed the MeshConfig in force")
			}
		})
	}
}

func injectedProxyConfig(t *testing.T, pod *corev1.Pod) *meshconfig.ProxyConfig {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		if c.Name != ProxyContainerName {
			continue
		}
		for _, e := range c.Env {
			if e.Name == "PROXY_CONFIG" {
				pc := &meshconfig.ProxyConfig{}
				if err := protojson.Unmarshal([]byte(e.Value), pc); err != nil {
					t.Fatalf("PROXY_CONFIG %q: %v", e.Value, err)
				}
				return pc
			}
		}
	}
	t.Fatalf("no PROXY_CONFIG in %s", strings.Join(containerNames(pod), ","))
	return nil
}

func containerNames(pod *corev1.Pod) []string {
	var out []string
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Name)
	}
	return out
}
