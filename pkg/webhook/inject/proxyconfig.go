package inject

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"istio.io/api/annotation"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingapi "istio.io/api/networking/v1beta1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/mesh"
)

// Env is what an injection reads besides the pod, its namespace and the
// injection configuration. The zero Env is an injector without a cluster:
// values' meshConfig.defaultConfig and no ProxyConfig resources.
type Env struct {
	// Mesh is the MeshConfig in force; its defaultConfig is the proxies'
	// configuration and templates see it as .MeshConfig. nil: values'
	// meshConfig.defaultConfig is used.
	Mesh *meshconfig.MeshConfig
	// ProxyConfigs are the ProxyConfig resources in force, in any order.
	// They are not modified.
	ProxyConfigs []*networkingv1beta1.ProxyConfig
}

// rootNamespace is the MeshConfig's rootNamespace, else Istio's default.
func (e Env) rootNamespace() string {
	if ns := e.Mesh.GetRootNamespace(); ns != "" {
		return ns
	}
	return mesh.DefaultRootNamespace
}

// proxyConfigLayers picks the ProxyConfig resources that apply to a pod,
// as istiod's EffectiveProxyConfig (pilot/pkg/model/proxy_config.go)
// picks them: in each namespace the oldest applies (creation time, then
// name). It returns the root namespace's resource without a selector,
// the pod's namespace's without a selector (none when the pod is in the
// root namespace), and the oldest of the pod's namespace whose selector
// matches the pod's labels; each may be nil. A selector with no labels
// selects nothing (Istio skips it when looking for a workload's resource,
// and it is not "no selector" either, so it never applies).
func proxyConfigLayers(env Env, pod *corev1.Pod) (root, namespace, workload *networkingv1beta1.ProxyConfig) {
	rootNS := env.rootNamespace()
	var candidates []*networkingv1beta1.ProxyConfig
	for _, pc := range env.ProxyConfigs {
		if pc.Namespace == rootNS || pc.Namespace == pod.Namespace {
			candidates = append(candidates, pc)
		}
	}
	sort.SliceStable(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Namespace < b.Namespace
	})
	for _, pc := range candidates {
		sel := pc.Spec.GetSelector()
		switch {
		case sel == nil && pc.Namespace == rootNS:
			if root == nil {
				root = pc
			}
		case sel == nil:
			// The pod's namespace, not the root: for a pod of the root
			// namespace Istio merges that namespace's resource once.
			if namespace == nil {
				namespace = pc
			}
		case pc.Namespace == pod.Namespace && len(sel.GetMatchLabels()) > 0 && selects(sel.GetMatchLabels(), pod.Labels):
			if workload == nil {
				workload = pc
			}
		}
	}
	return root, namespace, workload
}

func selects(match, labels map[string]string) bool {
	for k, v := range match {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// fromResource is the part of the proxies' configuration a ProxyConfig
// resource sets: concurrency, image (its imageType) and
// environmentVariables (ProxyConfig.proxyMetadata), as istiod converts it.
func fromResource(pc *networkingv1beta1.ProxyConfig) *meshconfig.ProxyConfig {
	if pc == nil {
		return nil
	}
	out := &meshconfig.ProxyConfig{}
	if c := pc.Spec.GetConcurrency(); c != nil {
		out.Concurrency = wrapperspb.Int32(c.GetValue())
	}
	if img := pc.Spec.GetImage(); img != nil {
		out.Image = proto.Clone(img).(*networkingapi.ProxyImage)
	}
	if len(pc.Spec.GetEnvironmentVariables()) > 0 {
		out.ProxyMetadata = make(map[string]string, len(pc.Spec.GetEnvironmentVariables()))
		for k, v := range pc.Spec.GetEnvironmentVariables() {
			out.ProxyMetadata[k] = v
		}
	}
	return out
}

// annotationProxyConfig parses the pod's proxy.istio.io/config, or returns
// nil when the pod has none.
func annotationProxyConfig(pod *corev1.Pod) (*meshconfig.ProxyConfig, error) {
	text, ok := pod.Annotations[annotation.ProxyConfig.Name]
	if !ok {
		return nil, nil
	}
	js, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("annotation %s is not YAML: %w", annotation.ProxyConfig.Name, err)
	}
	over := &meshconfig.ProxyConfig{}
	if err := protojson.Unmarshal(js, over); err != nil {
		return nil, fmt.Errorf("annotation %s is not a ProxyConfig: %w", annotation.ProxyConfig.Name, err)
	}
	return over, nil
}

// applyProxyConfig merges over into pc as istiod merges one ProxyConfig
// onto another (mesh.MergeProxyConfig, which decodes the higher layer's
// JSON into the lower): every top-level field over sets replaces pc's
// whole, except proxyMetadata, whose keys are merged (over's win), and
// proxyHeaders, whose forwardedClientCert, requestId, attemptCount,
// server and envoyDebugHeaders stay pc's where over's leave them unset.
// proto.Merge would be a deeper merge (tracing settings of two layers
// mixed, for one), which is not what a proxy under istiod gets.
func applyProxyConfig(pc, over *meshconfig.ProxyConfig) {
	if over == nil {
		return
	}
	origMeta := pc.ProxyMetadata
	origHeaders := pc.ProxyHeaders
	dst := pc.ProtoReflect()
	over.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			m := dst.NewField(fd).Map()
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool { m.Set(k, e); return true })
			dst.Set(fd, protoreflect.ValueOfMap(m))
		case fd.IsList():
			l := dst.NewField(fd).List()
			for i := 0; i < v.List().Len(); i++ {
				l.Append(v.List().Get(i))
			}
			dst.Set(fd, protoreflect.ValueOfList(l))
		case fd.Message() != nil:
			dst.Set(fd, protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect()))
		default:
			dst.Set(fd, v)
		}
		return true
	})
	if len(origMeta) > 0 && len(over.ProxyMetadata) > 0 {
		merged := make(map[string]string, len(origMeta)+len(over.ProxyMetadata))
		for k, v := range origMeta {
			merged[k] = v
		}
		for k, v := range over.ProxyMetadata {
			merged[k] = v
		}
		pc.ProxyMetadata = merged
	}
	if ph := pc.ProxyHeaders; ph != nil && origHeaders != nil && over.ProxyHeaders != nil {
		keepUnset(ph.ProtoReflect(), origHeaders.ProtoReflect(),
			"forwarded_client_cert", "request_id", "attempt_count", "server", "envoy_debug_headers")
	}
}

// keepUnset copies the named fields from orig to m where m leaves them
// unset.
func keepUnset(m, orig protoreflect.Message, names ...protoreflect.Name) {
	fields := m.Descriptor().Fields()
	for _, n := range names {
		fd := fields.ByName(n)
		if fd == nil || m.Has(fd) || !orig.Has(fd) {
			continue
		}
		m.Set(fd, orig.Get(fd))
	}
}

// withProxyConfigs layers the ProxyConfig resources and the pod's
// proxy.istio.io/config annotation onto base (the mesh's defaultConfig),
// lowest first, as istiod's EffectiveProxyConfig does: base, the root
// namespace's resource without a selector, the pod's namespace's without
// a selector, then the annotation with the resource selecting the pod on
// top of it. That last order is Istio's (a workload's ProxyConfig wins
// over the pod's own annotation in what the injector writes). pilot-agent
// applies the annotation once more over PROXY_CONFIG when it starts (it
// reads it from the pod's downward-API annotations), so for the agent's
// own settings the annotation has the last word; discovery's templates
// mount the same file, so the same holds here.
func withProxyConfigs(base *meshconfig.ProxyConfig, env Env, pod *corev1.Pod) (*meshconfig.ProxyConfig, error) {
	ann, err := annotationProxyConfig(pod)
	if err != nil {
		return nil, err
	}
	root, ns, workload := proxyConfigLayers(env, pod)
	applyProxyConfig(base, fromResource(root))
	applyProxyConfig(base, fromResource(ns))
	top := ann
	if w := fromResource(workload); w != nil {
		if top == nil {
			top = &meshconfig.ProxyConfig{}
		}
		applyProxyConfig(top, w)
	}
	applyProxyConfig(base, top)
	return base, nil
}

// KnownImageTypes are the image types Istio publishes as tag suffixes.
var KnownImageTypes = []string{"distroless", "debug"}

// withImageType puts imageType on a tag as Istio's injector does: a known
// type suffix already on the tag is replaced, "default" removes it, ""
// leaves the tag alone, any other type is appended as "-<type>".
func withImageType(tag, imageType string) string {
	if imageType == "" {
		return tag
	}
	for _, t := range KnownImageTypes {
		if strings.HasSuffix(tag, "-"+t) {
			tag = strings.TrimSuffix(tag, "-"+t)
			break
		}
	}
	if imageType == "default" {
		return tag
	}
	return tag + "-" + imageType
}
