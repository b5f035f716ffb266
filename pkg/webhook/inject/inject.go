package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"istio.io/api/annotation"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Inject decides whether pod is injected (see Decide) and, if so, returns
// a new Pod with the templates' parts added. pod is never modified; when
// the decision is to skip, pod itself is returned. The revision is
// values' "revision", without tags (InjectFor takes them). An error means
// the pod asked for something invalid (a bad annotation, an unknown
// template) or a template failed to render; its message is meant for the
// user who created the pod.
func Inject(pod *corev1.Pod, ns *corev1.Namespace, cfg *Config, values Values) (*corev1.Pod, Decision, error) {
	return InjectFor(pod, ns, cfg, values, RevisionSelection(values.Revision()))
}

// InjectFor is Inject for the control plane sel describes: its revision
// and the revision tags that point at it.
func InjectFor(pod *corev1.Pod, ns *corev1.Namespace, cfg *Config, values Values, sel Selection) (*corev1.Pod, Decision, error) {
	return InjectWith(pod, ns, cfg, values, sel, Env{})
}

// InjectWith is InjectFor with the MeshConfig and the ProxyConfig
// resources in force (env): the mesh's defaultConfig, the ProxyConfig
// resources that apply to the pod and its proxy.istio.io/config make the
// proxy's configuration, with istiod's precedence (see withProxyConfigs),
// and templates see the MeshConfig as .MeshConfig.
func InjectWith(pod *corev1.Pod, ns *corev1.Namespace, cfg *Config, values Values, sel Selection, env Env) (*corev1.Pod, Decision, error) {
	d := Decide(pod, ns, cfg, sel)
	if !d.Inject {
		return pod, d, nil
	}
	out, err := injectPod(pod, cfg, values, env)
	if err != nil {
		return nil, d, err
	}
	return out, d, nil
}

func injectPod(pod *corev1.Pod, cfg *Config, values Values, env Env) (*corev1.Pod, error) {
	if err := checkAnnotations(pod); err != nil {
		return nil, err
	}
	names, err := templateNames(pod, cfg)
	if err != nil {
		return nil, err
	}
	data, err := templateData(pod, values, env)
	if err != nil {
		return nil, err
	}
	var parts any = map[string]any{}
	for _, name := range names {
		rendered, err := render(cfg.compiled[name], data, cfg.parsed)
		if err != nil {
			return nil, err
		}
		parts = overlay(parts, rendered, "")
	}
	user, err := toMap(pod)
	if err != nil {
		return nil, err
	}
	merged := overlay(parts, user, "")
	out := &corev1.Pod{}
	if err := fromMap(merged, out); err != nil {
		return nil, fmt.Errorf("templates %s rendered an invalid pod: %w", strings.Join(names, ", "), err)
	}
	finish(pod, out, cfg, data)
	return out, nil
}

// templateNames is the pod's inject.istio.io/templates, else the
// configured defaults.
func templateNames(pod *corev1.Pod, cfg *Config) ([]string, error) {
	names := cfg.DefaultTemplates
	if v, ok := pod.Annotations[annotation.InjectTemplates.Name]; ok {
		names = nil
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("annotation %s names no template", annotation.InjectTemplates.Name)
	}
	return cfg.resolve(names, "injection template")
}

func templateData(pod *corev1.Pod, values Values, env Env) (*TemplateData, error) {
	pc, err := proxyConfig(pod, values, env)
	if err != nil {
		return nil, err
	}
	meta := *pod.ObjectMeta.DeepCopy()
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	rev := values.Revision()
	if rev == "" {
		rev = "default"
	}
	return &TemplateData{
		ObjectMeta:       meta,
		Spec:             *pod.Spec.DeepCopy(),
		DeploymentMeta:   deploymentMeta(pod),
		ProxyConfig:      pc,
		MeshConfig:       env.Mesh,
		Values:           values,
		Revision:         rev,
		ProxyImage:       proxyImage(pod, values, pc),
		ProxyInitImage:   proxyImage(pod, values, nil),
		ProxyUID:         ProxyUID,
		ProxyGID:         ProxyGID,
		NativeSidecars:   nativeSidecars(pod, values),
		InterceptionMode: interceptionMode(pod, pc),
	}, nil
}

// deploymentMeta names the workload the pod belongs to: its controller
// (a ReplicaSet without its pod-template-hash suffix, so the Deployment),
// else its generateName, else its name.
func deploymentMeta(pod *corev1.Pod) metav1.ObjectMeta {
	name := pod.Name
	if name == "" {
		name = strings.TrimSuffix(pod.GenerateName, "-")
	}
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		name = ref.Name
		if h := pod.Labels["pod-template-hash"]; ref.Kind == "ReplicaSet" && h != "" {
			name = strings.TrimSuffix(name, "-"+h)
		}
		break
	}
	return metav1.ObjectMeta{Name: name, Namespace: pod.Namespace}
}

// sidecarStatus is written to sidecar.istio.io/status: what was injected.
type sidecarStatus struct {
	InitContainers   []string `json:"initContainers"`
	Containers       []string `json:"containers"`
	Volumes          []string `json:"volumes"`
	ImagePullSecrets []string `json:"imagePullSecrets"`
	Revision         string   `json:"revision"`
}

// finish puts the added containers where Istio puts them, adds the
// configured annotations the pod does not set, and records the status.
func finish(orig, out *corev1.Pod, cfg *Config, data *TemplateData) {
	st := sidecarStatus{Revision: data.Revision}
	addedInit := added(orig.Spec.InitContainers, out.Spec.InitContainers, containerName, &st.InitContainers)
	addedMain := added(orig.Spec.Containers, out.Spec.Containers, containerName, &st.Containers)
	added(orig.Spec.Volumes, out.Spec.Volumes, func(v corev1.Volume) string { return v.Name }, &st.Volumes)
	added(orig.Spec.ImagePullSecrets, out.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) string { return r.Name }, &st.ImagePullSecrets)

	if addedInit[ProxyContainerName] {
		// Native sidecar: the proxy starts before the pod's own init
		// containers, so they run inside the mesh.
		out.Spec.InitContainers = moveFirst(out.Spec.InitContainers, containerName, addedInit)
	}
	if addedMain[ProxyContainerName] && data.ProxyConfig.GetHoldApplicationUntilProxyStarts().GetValue() {
		out.Spec.Containers = moveFirst(out.Spec.Containers, containerName, map[string]bool{ProxyContainerName: true})
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	for k, v := range cfg.InjectedAnnotations {
		if _, ok := out.Annotations[k]; !ok {
			out.Annotations[k] = v
		}
	}
	b, _ := json.Marshal(st) // a struct of strings always marshals
	out.Annotations[annotation.SidecarStatus.Name] = string(b)
}

func containerName(c corev1.Container) string { return c.Name }

// added returns the names in after that are not in before, and appends
// them, in after's order, to record.
func added[T any](before, after []T, name func(T) string, record *[]string) map[string]bool {
	had := make(map[string]bool, len(before))
	for _, e := range before {
		had[name(e)] = true
	}
	out := map[string]bool{}
	for _, e := range after {
		if n := name(e); !had[n] {
			out[n] = true
			*record = append(*record, n)
		}
	}
	return out
}

func toMap(pod *corev1.Pod) (map[string]any, error) {
	b, err := json.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("encode pod: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	return m, nil
}

// fromMap decodes m into pod strictly, so that a field a template
// misspells is an error and not a silently dropped setting.
func fromMap(m any, pod *corev1.Pod) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(pod)
}
