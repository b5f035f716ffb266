package inject

import (
	corev1 "k8s.io/api/core/v1"
)

// RenderPod completes pod with its templates (inject.istio.io/templates,
// else the configured defaults) as Inject does, without deciding whether
// the pod is to be injected: the caller has decided. The Gateway API
// deployment controller renders its gateway pods with it, as istiod's
// renders its kube-gateway template from the injection configuration, so
// that the proxy image, the discovery address and the proxy settings are
// the injector's (ProxyConfigs in env selecting the pod included, as
// istiod's controller applies them). pod is not modified.
func RenderPod(pod *corev1.Pod, cfg *Config, values Values, env Env) (*corev1.Pod, error) {
	return injectPod(pod, cfg, values, env)
}

// RenderPod is RenderPod with the injector's configuration, MeshConfig
// and ProxyConfigs in force.
func (i *Injector) RenderPod(pod *corev1.Pod) (*corev1.Pod, error) {
	s := i.Current()
	return RenderPod(pod, s.Config, s.Values, i.env())
}
