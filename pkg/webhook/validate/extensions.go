package validate

import (
	"net/url"
	"regexp"

	"google.golang.org/protobuf/proto"
	extensions "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// checkWorkloadGroup is Istio's ValidateWorkloadGroup: a template, valid
// metadata labels, and a well formed readiness probe. The template's
// address is not required (it is filled in at registration).
func checkWorkloadGroup(m proto.Message, _ *meta, p *problems) {
	wg := m.(*networking.WorkloadGroup)
	if wg.GetTemplate() == nil {
		p.add("spec.template", "template is required")
		return
	}
	if md := wg.GetMetadata(); md != nil {
		before := len(p.list)
		checkLabels(p, "spec.metadata.labels", md.GetLabels())
		if len(p.list) > before {
			return
		}
	}
	checkProbe(p, "spec.probe", wg.GetProbe())
}

var probeHeaderName = regexp.MustCompile("^[-A-Za-z0-9]+$")

func checkProbe(p *problems, path string, probe *networking.ReadinessProbe) {
	if probe == nil {
		return
	}
	for _, f := range []struct {
		name string
		v    int32
	}{
		{"periodSeconds", probe.GetPeriodSeconds()},
		{"initialDelaySeconds", probe.GetInitialDelaySeconds()},
		{"timeoutSeconds", probe.GetTimeoutSeconds()},
		{"successThreshold", probe.GetSuccessThreshold()},
		{"failureThreshold", probe.GetFailureThreshold()},
	} {
		if f.v < 0 {
			p.add(path+"."+f.name, "%s must be non-negative", f.name)
		}
	}
	switch h := probe.GetHealthCheckMethod().(type) {
	case *networking.ReadinessProbe_HttpGet:
		if h.HttpGet == nil {
			p.add(path+".httpGet", "httpGet may not be nil")
			break
		}
		checkPort(p, path+".httpGet.port", h.HttpGet.GetPort())
		if s := h.HttpGet.GetScheme(); s != "" && s != "HTTPS" && s != "HTTP" {
			p.add(path+".httpGet.scheme", `httpGet.scheme must be one of "HTTPS", "HTTP"`)
		}
		for i, hd := range h.HttpGet.GetHttpHeaders() {
			hpath := at(path+".httpGet.httpHeaders", i)
			switch {
			case hd == nil:
				p.add(hpath, "invalid nil header")
			case hd.GetName() == "":
				p.add(hpath+".name", "header name cannot be empty")
			case !probeHeaderName.MatchString(hd.GetName()):
				p.add(hpath+".name", "header name %s is not a valid header name", hd.GetName())
			}
		}
	case *networking.ReadinessProbe_TcpSocket:
		if h.TcpSocket == nil {
			p.add(path+".tcpSocket", "tcpSocket may not be nil")
			break
		}
		checkPort(p, path+".tcpSocket.port", h.TcpSocket.GetPort())
	case *networking.ReadinessProbe_Exec:
		if h.Exec == nil {
			p.add(path+".exec", "exec may not be nil")
			break
		}
		if len(h.Exec.GetCommand()) == 0 {
			p.add(path+".exec.command", "exec.command is required")
		}
	default:
		p.add(path, "unknown health check method %T", h)
	}
}

// checkProxyConfig is Istio's ValidateProxyConfig: a selector without
// wildcards, concurrency not negative.
func checkProxyConfig(m proto.Message, _ *meta, p *problems) {
	pc := m.(*networkingv1beta1.ProxyConfig)
	checkPolicyTarget(p, pc.GetSelector(), nil, nil)
	if pc.GetConcurrency().GetValue() < 0 {
		p.add("spec.concurrency", "concurrency must be greater than or equal to 0")
	}
}

// checkWasmPlugin is Istio's ValidateWasmPlugin: one of selector or
// targetRef(s); a URL of a known scheme; sha256, imagePullSecret,
// pluginName and vmConfig.env well formed; match ports in range.
func checkWasmPlugin(m proto.Message, _ *meta, p *problems) {
	w := m.(*extensions.WasmPlugin)
	checkPolicyTarget(p, w.GetSelector(), w.GetTargetRef(), w.GetTargetRefs())
	checkWasmCode(p, "spec", w.GetUrl(), w.GetSha256(), w.GetImagePullSecret(), w.GetPluginName(), w.GetVmConfig())
	for i, sel := range w.GetMatch() {
		if sel == nil {
			p.add(at("spec.match", i), "spec.Match[%d] is nil", i)
			continue
		}
		checkMatchPorts(p, at("spec.match", i), sel.GetPorts())
	}
}

// checkTrafficExtension is Istio's ValidateTrafficExtension: exactly one
// of wasm or lua, each checked as WasmPlugin's code or a non-empty inline
// Lua of at most 64 KiB; selector or targetRefs; match ports in range.
func checkTrafficExtension(m proto.Message, _ *meta, p *problems) {
	t := m.(*extensions.TrafficExtension)
	wasm, lua := t.GetWasm(), t.GetLua()
	if (wasm != nil) == (lua != nil) {
		p.add("spec", "exactly one of wasm or lua must be set")
	}
	checkPolicyTarget(p, t.GetSelector(), nil, t.GetTargetRefs())
	if lua != nil {
		switch n := len(lua.GetInlineCode()); {
		case n == 0:
			p.add("spec.lua.inlineCode", "lua.inlineCode cannot be empty")
		case n > 65536:
			p.add("spec.lua.inlineCode", "lua.inlineCode exceeds maximum size of 64KB")
		}
	}
	if wasm != nil {
		checkWasmCode(p, "spec.wasm", wasm.GetUrl(), wasm.GetSha256(), wasm.GetImagePullSecret(), wasm.GetPluginName(), wasm.GetVmConfig())
	}
	for i, sel := range t.GetMatch() {
		if sel == nil {
			p.add(at("spec.match", i), "spec.Match[%d] is nil", i)
			continue
		}
		checkMatchPorts(p, at("spec.match", i), sel.GetPorts())
	}
}

func checkMatchPorts(p *problems, path string, ports []*typev1beta1.PortSelector) {
	for i, port := range ports {
		switch {
		case port == nil:
			p.add(at(path+".ports", i), "port is nil")
		case port.GetNumber() == 0 || port.GetNumber() > 65535:
			p.add(at(path+".ports", i), "port %d is out of range", port.GetNumber())
		}
	}
}

var wasmSHA = regexp.MustCompile("^[a-f0-9]{64}$")

func checkWasmCode(p *problems, path, u, sha, secret, name string, vm *extensions.VmConfig) {
	checkWasmURL(p, path+".url", u)
	if sha != "" {
		if len(sha) != 64 {
			p.add(path+".sha256", "sha256 field must be 64 characters long")
		} else if !wasmSHA.MatchString(sha) {
			p.add(path+".sha256", "sha256 field must match [a-f0-9]{64} pattern")
		}
	}
	if len(secret) > 253 {
		p.add(path+".imagePullSecret", "imagePullSecret field must be less than 253 characters long")
	}
	if len(name) > 256 {
		p.add(path+".pluginName", "pluginName field must be less than 255 characters long")
	}
	seen := map[string]bool{}
	for _, env := range vm.GetEnv() {
		if env == nil {
			continue
		}
		epath := path + ".vmConfig.env"
		switch {
		case env.GetName() == "":
			p.add(epath, "spec.vmConfig.env invalid")
		case len(env.GetName()) > 256:
			p.add(epath, "env.name field must be less than 255 characters long")
		case seen[env.GetName()]:
			p.add(epath, "duplicate env")
		case env.GetValueFrom() != extensions.EnvValueSource_INLINE && env.GetValue() != "":
			p.add(epath, "value may only be set when valueFrom is INLINE")
		default:
			seen[env.GetName()] = true
			continue
		}
		return // Istio stops at the first bad env
	}
}

// checkWasmURL: set, and of scheme file, http, https, oci or none (a
// reference without a scheme is read as http://...), parsed as Istio's
// strictParseURL does.
func checkWasmURL(p *problems, path, u string) {
	if u == "" {
		p.add(path, "url field needs to be set")
		return
	}
	parsed, err := url.ParseRequestURI(u)
	if err != nil {
		nu, nerr := url.ParseRequestURI("http://" + u)
		if nerr != nil {
			p.add(path, "failed to parse url: %s", err)
			return
		}
		if _, err := url.Parse("http://" + u); err != nil {
			p.add(path, "failed to strict parse url: %s", err)
			return
		}
		parsed = nu
	} else if _, err := url.Parse(u); err != nil {
		p.add(path, "failed to strict parse url: %s", err)
		return
	}
	switch parsed.Scheme {
	case "", "file", "http", "https", "oci":
	default:
		p.add(path, "url contains unsupported scheme: %s", parsed.Scheme)
	}
}
