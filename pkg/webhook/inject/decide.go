package inject

import (
	"strings"

	"istio.io/api/annotation"
	"istio.io/api/label"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// NamespaceInjectionLabel is the namespace label that selects the default
// revision's injector ("enabled") or keeps every injector away ("disabled").
const NamespaceInjectionLabel = "istio-injection"

// ignoredNamespaces are never injected, whatever their labels say.
var ignoredNamespaces = map[string]bool{
	"kube-system": true, "kube-public": true, "kube-node-lease": true, "local-path-storage": true,
}

// Decision says whether a pod is injected and why.
type Decision struct {
	Inject bool
	// Reason is a short, stable phrase for logs, metrics and /debug/inject.
	Reason string
}

func skip(reason string) Decision { return Decision{Reason: reason} }

// Decide applies Istio's rules, in Istio's order: host network and already
// injected pods are skipped; an explicit "false" on the pod always wins;
// the namespace (istio-injection=enabled, or istio.io/rev=<revision or one
// of its tags>) or, in an unlabelled namespace, the pod's own label must
// select this control plane (sel); then the pod's explicit choice, the
// never- and always-inject selectors and finally the policy decide.
func Decide(pod *corev1.Pod, ns *corev1.Namespace, cfg *Config, sel Selection) Decision {
	if pod.Spec.HostNetwork {
		return skip("pod uses the host network")
	}
	if ignoredNamespaces[pod.Namespace] {
		return skip("namespace " + pod.Namespace + " is never injected")
	}
	if _, ok := pod.Annotations[annotation.SidecarStatus.Name]; ok {
		return skip("pod is already injected")
	}
	choice, explicit := podChoice(pod)
	if explicit && !choice {
		return skip("pod opts out with sidecar.istio.io/inject")
	}
	if d, selected := namespaceSelects(pod, ns, sel, explicit && choice); !selected {
		return d
	}
	if explicit {
		return Decision{Inject: true, Reason: "pod opts in with sidecar.istio.io/inject"}
	}
	podLabels := labels.Set(pod.Labels)
	for _, s := range cfg.never {
		if s.Matches(podLabels) {
			return skip("pod matches neverInjectSelector " + s.String())
		}
	}
	for _, s := range cfg.always {
		if s.Matches(podLabels) {
			return Decision{Inject: true, Reason: "pod matches alwaysInjectSelector " + s.String()}
		}
	}
	if cfg.Policy == PolicyDisabled {
		return skip("policy is disabled and the pod does not opt in")
	}
	return Decision{Inject: true, Reason: "policy is enabled"}
}

// podChoice reads sidecar.istio.io/inject from the pod's labels, or, when
// the label is absent, from its annotations (the older form).
func podChoice(pod *corev1.Pod) (inject, explicit bool) {
	v, ok := pod.Labels[label.SidecarInject.Name]
	if !ok {
		v, ok = pod.Annotations[annotation.SidecarInject.Name]
	}
	if !ok || v == "" {
		return false, false
	}
	switch strings.ToLower(v) {
	case "y", "yes", "true", "on", "enabled":
		return true, true
	}
	return false, true
}

// namespaceSelects mirrors the selectors of Istio's
// MutatingWebhookConfigurations, the revision's and its tags':
// istio-injection=enabled selects the default (sel.IsDefault);
// istio.io/rev selects its revision or the revision its tag points at; an
// unlabelled namespace leaves the choice to the pod (istio.io/rev, or
// sidecar.istio.io/inject for the default).
func namespaceSelects(pod *corev1.Pod, ns *corev1.Namespace, sel Selection, podOptsIn bool) (Decision, bool) {
	var nsLabels map[string]string
	if ns != nil {
		nsLabels = ns.Labels
	}
	if v, ok := nsLabels[NamespaceInjectionLabel]; ok {
		if v == "enabled" && sel.IsDefault() {
			return Decision{}, true
		}
		return skip("namespace label istio-injection=" + v + " does not select revision " + revisionName(sel.Revision)), false
	}
	if v, ok := nsLabels[label.IoIstioRev.Name]; ok {
		if sel.Selects(v) {
			return Decision{}, true
		}
		return skip("namespace label istio.io/rev=" + v + " does not select revision " + revisionName(sel.Revision)), false
	}
	if v, ok := pod.Labels[label.IoIstioRev.Name]; ok {
		if sel.Selects(v) {
			return Decision{}, true
		}
		return skip("pod label istio.io/rev=" + v + " does not select revision " + revisionName(sel.Revision)), false
	}
	if podOptsIn && sel.IsDefault() {
		return Decision{}, true
	}
	return skip("namespace is not labelled for injection"), false
}

func isDefaultRevision(r string) bool { return r == "" || r == "default" }

func sameRevision(a, b string) bool {
	if isDefaultRevision(a) && isDefaultRevision(b) {
		return true
	}
	return a == b
}

func revisionName(r string) string {
	if isDefaultRevision(r) {
		return "default"
	}
	return r
}
