package inject

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"istio.io/api/annotation"
	meshconfig "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Annotations read by the injector and its templates, checked before any
// template runs so that a typo is reported by name.
var (
	quantityAnnotations = []string{
		annotation.SidecarProxyCPU.Name, annotation.SidecarProxyMemory.Name,
		annotation.SidecarProxyCPULimit.Name, annotation.SidecarProxyMemoryLimit.Name,
	}
	cidrAnnotations = []string{
		annotation.SidecarTrafficIncludeOutboundIPRanges.Name,
		annotation.SidecarTrafficExcludeOutboundIPRanges.Name,
	}
	portAnnotations = []string{
		annotation.SidecarTrafficIncludeInboundPorts.Name,
		annotation.SidecarTrafficExcludeInboundPorts.Name,
		annotation.SidecarTrafficExcludeOutboundPorts.Name,
	}
	logLevels = map[string]bool{
		"trace": true, "debug": true, "info": true, "warning": true, "warn": true,
		"error": true, "critical": true, "off": true,
	}
)

// checkAnnotations validates the injection annotations the pod sets.
func checkAnnotations(pod *corev1.Pod) error {
	a := pod.Annotations
	for _, name := range quantityAnnotations {
		if v, ok := a[name]; ok {
			if _, err := resource.ParseQuantity(v); err != nil {
				return fmt.Errorf("annotation %s=%q is not a resource quantity: %w", name, v, err)
			}
		}
	}
	for _, name := range cidrAnnotations {
		if err := checkList(a, name, func(s string) error { _, err := netip.ParsePrefix(s); return err }); err != nil {
			return err
		}
	}
	for _, name := range portAnnotations {
		if err := checkList(a, name, checkPort); err != nil {
			return err
		}
	}
	if v, ok := a[annotation.SidecarLogLevel.Name]; ok && !logLevels[strings.ToLower(v)] {
		return fmt.Errorf("annotation %s=%q is not a log level (trace, debug, info, warning, error, critical, off)", annotation.SidecarLogLevel.Name, v)
	}
	if v, ok := a[annotation.SidecarInterceptionMode.Name]; ok {
		if _, known := meshconfig.ProxyConfig_InboundInterceptionMode_value[v]; !known {
			return fmt.Errorf("annotation %s=%q is not an interception mode (REDIRECT, TPROXY, NONE)", annotation.SidecarInterceptionMode.Name, v)
		}
	}
	if v, ok := a[annotation.SidecarNativeSidecar.Name]; ok {
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("annotation %s=%q is neither true nor false", annotation.SidecarNativeSidecar.Name, v)
		}
	}
	return nil
}

// checkList checks a comma-separated annotation value; "*" and "" are
// always accepted.
func checkList(a map[string]string, name string, check func(string) error) error {
	v, ok := a[name]
	if !ok || v == "*" || strings.TrimSpace(v) == "" {
		return nil
	}
	for _, item := range strings.Split(v, ",") {
		if err := check(strings.TrimSpace(item)); err != nil {
			return fmt.Errorf("annotation %s=%q: %q: %w", name, v, item, err)
		}
	}
	return nil
}

func checkPort(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("not a port number (1-65535)")
	}
	return nil
}

// proxyConfig builds the proxy's configuration: the MeshConfig's
// defaultConfig (Istio's defaults with the mesh's own applied), or without
// a MeshConfig values' meshConfig.defaultConfig, then the ProxyConfig
// resources that apply to the pod and its proxy.istio.io/config, with
// istiod's precedence (withProxyConfigs).
func proxyConfig(pod *corev1.Pod, values Values, env Env) (*meshconfig.ProxyConfig, error) {
	pc := &meshconfig.ProxyConfig{}
	if mc := env.Mesh; mc.GetDefaultConfig() != nil {
		pc = proto.Clone(mc.GetDefaultConfig()).(*meshconfig.ProxyConfig)
	} else if d := values.Get("meshConfig.defaultConfig"); d != nil {
		js, err := toJSON(d)
		if err != nil {
			return nil, fmt.Errorf("values meshConfig.defaultConfig: %w", err)
		}
		if err := protojson.Unmarshal([]byte(js), pc); err != nil {
			return nil, fmt.Errorf("values meshConfig.defaultConfig: %w", err)
		}
	}
	if pc.DiscoveryAddress == "" {
		pc.DiscoveryAddress = discoveryAddress(values)
	}
	if pc.HoldApplicationUntilProxyStarts == nil && values.Bool("global.proxy.holdApplicationUntilProxyStarts") {
		pc.HoldApplicationUntilProxyStarts = wrapperspb.Bool(true)
	}
	return withProxyConfigs(pc, env, pod)
}

// discoveryAddress is istiod[-<rev>].<istioNamespace>.svc:15012 unless the
// values name one.
func discoveryAddress(values Values) string {
	if a := values.String("global.discoveryAddress"); a != "" {
		return a
	}
	ns := values.String("global.istioNamespace")
	if ns == "" {
		ns = "istio-system"
	}
	name := "istiod"
	if r := values.Revision(); !isDefaultRevision(r) {
		name += "-" + r
	}
	return name + "." + ns + ".svc:15012"
}

// interceptionMode is the pod's annotation, else the ProxyConfig's mode.
func interceptionMode(pod *corev1.Pod, pc *meshconfig.ProxyConfig) string {
	if v, ok := pod.Annotations[annotation.SidecarInterceptionMode.Name]; ok {
		return v
	}
	return pc.GetInterceptionMode().String()
}

// nativeSidecars is the pod's sidecar.istio.io/nativeSidecar, else
// values global.nativeSidecar.
func nativeSidecars(pod *corev1.Pod, values Values) bool {
	if v, ok := pod.Annotations[annotation.SidecarNativeSidecar.Name]; ok {
		b, _ := strconv.ParseBool(v) // checked by checkAnnotations
		return b
	}
	return values.Bool("global.nativeSidecar")
}

// proxyImage is the pod's sidecar.istio.io/proxyImage, else
// global.proxy.image (used as is when it names a registry), else
// <global.hub>/<global.proxy.image>:<global.tag> with the image type on
// the tag as Istio's injector puts it: the pod's
// sidecar.istio.io/proxyImageType, else the ProxyConfig's image.imageType
// (from a ProxyConfig resource, the mesh's defaultConfig or the pod's
// proxy.istio.io/config), else global.variant. A type needs a tag to go
// on: without global.tag the image is left untyped.
func proxyImage(pod *corev1.Pod, values Values, pc *meshconfig.ProxyConfig) string {
	if v := pod.Annotations[annotation.SidecarProxyImage.Name]; v != "" {
		return v
	}
	img := values.String("global.proxy.image")
	if strings.Contains(img, "/") {
		return img
	}
	if hub := values.String("global.hub"); hub != "" {
		img = hub + "/" + img
	}
	if tag := toString(values.Get("global.tag")); tag != "" {
		imageType := pc.GetImage().GetImageType()
		if imageType == "" {
			imageType = values.String("global.variant")
		}
		if v, ok := pod.Annotations[annotation.SidecarProxyImageType.Name]; ok {
			imageType = v
		}
		img += ":" + withImageType(tag, imageType)
	}
	return img
}
