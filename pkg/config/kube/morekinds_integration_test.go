package kube

import (
	"testing"

	extensionsapi "istio.io/api/extensions/v1alpha1"
	networkingapi "istio.io/api/networking/v1alpha3"
	extensionsv1alpha1 "istio.io/client-go/pkg/apis/extensions/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/config/kube/kubetest"
	"github.com/meshplane/discovery/pkg/model"
)

// The kinds discovery reads without acting on them (yet) reach the World
// from the API server like the others, each in the version it watches.
func TestIntegrationEveryIstioKindReachesTheWorld(t *testing.T) {
	rc := startOnRealCluster(t, func(rc *realCluster) { kubetest.InstallCRDs(bg, t, rc.crds) })
	om := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "default"} }
	mustCreate(t, rc.istio.NetworkingV1alpha3().EnvoyFilters("default").Create, &networkingv1alpha3.EnvoyFilter{ObjectMeta: om("ef")})
	mustCreate(t, rc.istio.NetworkingV1().WorkloadGroups("default").Create, &networkingv1.WorkloadGroup{
		ObjectMeta: om("wg"),
		Spec:       networkingapi.WorkloadGroup{Template: &networkingapi.WorkloadEntry{ServiceAccount: "vm"}},
	})
	mustCreate(t, rc.istio.NetworkingV1beta1().ProxyConfigs("default").Create, &networkingv1beta1.ProxyConfig{ObjectMeta: om("pc")})
	mustCreate(t, rc.istio.ExtensionsV1alpha1().WasmPlugins("default").Create, &extensionsv1alpha1.WasmPlugin{
		ObjectMeta: om("wp"),
		Spec:       extensionsapi.WasmPlugin{Url: "oci://example/p:1"},
	})
	mustCreate(t, rc.istio.ExtensionsV1alpha1().TrafficExtensions("default").Create, &extensionsv1alpha1.TrafficExtension{ObjectMeta: om("te")})
	eventually(t, "every kind's object is in the World", func() bool {
		w := rc.world()
		for kind, name := range map[model.Kind]string{
			model.KindEnvoyFilter: "ef", model.KindWorkloadGroup: "wg", model.KindProxyConfig: "pc",
			model.KindWasmPlugin: "wp", model.KindTrafficExtension: "te",
		} {
			if w.Config(kind, "default", name) == nil {
				return false
			}
		}
		return true
	})
}
