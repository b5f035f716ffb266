package dataplane

import (
	"regexp"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matchtmpl "github.com/envoyproxy/go-control-plane/envoy/extensions/path/match/uri_template/v3"
	rewritetmpl "github.com/envoyproxy/go-control-plane/envoy/extensions/path/rewrite/uri_template/v3"
)

// templateRegex turns an Envoy URI template ("/foo/{name}/**",
// "/{a=*}/{b=**}") into a regular expression with one named group per
// variable: * is one path segment, ** any number of them.
func templateRegex(tmpl string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	n := 0
	for i := 0; i < len(tmpl); {
		switch {
		case tmpl[i] == '{':
			end := strings.IndexByte(tmpl[i:], '}')
			if end < 0 {
				return nil, errBadTemplate
			}
			name, pat, ok := strings.Cut(tmpl[i+1:i+end], "=")
			if !ok {
				pat = "*"
			}
			if name == "*" || name == "**" {
				// Istio writes {*} and {**} for anonymous variables.
				pat, name = name, ""
			}
			if name == "" {
				n++
				name = "v" + strings.Repeat("_", n)
			}
			b.WriteString("(?P<" + sanitize(name) + ">" + segmentsRegex(pat) + ")")
			i += end + 1
		case strings.HasPrefix(tmpl[i:], "**"):
			b.WriteString(".*")
			i += 2
		case tmpl[i] == '*':
			b.WriteString("[^/]+")
			i++
		default:
			b.WriteString(regexp.QuoteMeta(tmpl[i : i+1]))
			i++
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

type templateError string

func (e templateError) Error() string { return string(e) }

const errBadTemplate = templateError("invalid URI template")

func segmentsRegex(pat string) string {
	var parts []string
	for _, seg := range strings.Split(pat, "/") {
		switch seg {
		case "**":
			parts = append(parts, ".*")
		case "*":
			parts = append(parts, "[^/]+")
		default:
			parts = append(parts, regexp.QuoteMeta(seg))
		}
	}
	return strings.Join(parts, "/")
}

func sanitize(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// matchURITemplate applies a route's path_match_policy.
func matchURITemplate(tc *corev3.TypedExtensionConfig, path string) bool {
	cfg, ok := unmarshalAny[matchtmpl.UriTemplateMatchConfig](tc.GetTypedConfig())
	if !ok {
		return false
	}
	re, err := templateRegex(cfg.GetPathTemplate())
	return err == nil && re.MatchString(path)
}

// rewriteURITemplate applies a path_rewrite_policy with the variables the
// route's path_match_policy captured.
func rewriteURITemplate(tc *corev3.TypedExtensionConfig, m *routev3.RouteMatch, path string) string {
	rw, ok := unmarshalAny[rewritetmpl.UriTemplateRewriteConfig](tc.GetTypedConfig())
	if !ok {
		return path
	}
	mc, ok := unmarshalAny[matchtmpl.UriTemplateMatchConfig](m.GetPathMatchPolicy().GetTypedConfig())
	if !ok {
		return path
	}
	re, err := templateRegex(mc.GetPathTemplate())
	if err != nil {
		return path
	}
	sub := re.FindStringSubmatch(path)
	if sub == nil {
		return path
	}
	out := rw.GetPathTemplateRewrite()
	for i, name := range re.SubexpNames() {
		if name != "" {
			out = strings.ReplaceAll(out, "{"+name+"}", sub[i])
		}
	}
	return out
}
