package corpus

import (
	"path/filepath"
	"sort"
	"strings"
)

// bundle is an Istio sample as its tasks apply it: the workloads, then
// one configuration file at a time (with the files that file needs).
type bundle struct {
	name     string
	platform []string
	configs  []string // globs
	// needs lists, by a config's file name prefix, the files applied
	// before it (the subsets a VirtualService routes to).
	needs map[string][]string
}

var bookinfo = []string{"samples/bookinfo/platform/kube/bookinfo.yaml", "samples/curl/curl.yaml"}

var bundles = []bundle{
	{
		name: "bookinfo", platform: bookinfo, configs: []string{"samples/bookinfo/networking/*.yaml"},
		needs: map[string][]string{
			"virtual-service-ratings-mysql.yaml": {"samples/bookinfo/platform/kube/bookinfo-ratings-v2-mysql.yaml", "samples/bookinfo/platform/kube/bookinfo-mysql.yaml", "samples/bookinfo/networking/destination-rule-all.yaml"},
			"virtual-service-ratings-db.yaml":    {"samples/bookinfo/platform/kube/bookinfo-ratings-v2.yaml", "samples/bookinfo/platform/kube/bookinfo-db.yaml", "samples/bookinfo/networking/destination-rule-all.yaml"},
			"virtual-service-details-v2.yaml":    {"samples/bookinfo/platform/kube/bookinfo-details-v2.yaml", "samples/bookinfo/networking/destination-rule-all.yaml"},
			"virtual-service-":                   {"samples/bookinfo/networking/destination-rule-all.yaml"},
			"fault-injection-":                   {"samples/bookinfo/networking/destination-rule-all.yaml"},
		},
	},
	{name: "bookinfo-mtls", platform: bookinfo, configs: []string{"samples/bookinfo/networking/virtual-service-reviews-jason-v2-v3.yaml"},
		needs: map[string][]string{"": {"samples/bookinfo/networking/destination-rule-all-mtls.yaml"}}},
	{name: "httpbin", platform: []string{"samples/httpbin/httpbin.yaml", "samples/curl/curl.yaml"}, configs: []string{"samples/httpbin/httpbin-gateway.yaml"}},
	{name: "helloworld", platform: []string{"samples/helloworld/helloworld.yaml", "samples/curl/curl.yaml"}, configs: []string{"samples/helloworld/helloworld-gateway.yaml", "samples/multicluster/expose-services.yaml"}},
	{name: "tcp-echo", platform: []string{"samples/tcp-echo/tcp-echo-services.yaml", "samples/curl/curl.yaml"}, configs: []string{"samples/tcp-echo/tcp-echo-all-v1.yaml", "samples/tcp-echo/tcp-echo-20-v2.yaml"}},
	{name: "websockets", platform: []string{"samples/websockets/app.yaml"}, configs: []string{"samples/websockets/route.yaml"}},
	{name: "external", platform: []string{"samples/curl/curl.yaml"}, configs: []string{"samples/external/*.yaml", "samples/bookinfo/networking/egress-rule-google-apis.yaml"}},
	{name: "grpc-echo", platform: []string{"samples/grpc-echo/grpc-echo.yaml", "samples/curl/curl.yaml"}},
	{name: "extauthz", platform: []string{"samples/extauthz/ext-authz.yaml", "samples/httpbin/httpbin.yaml"}},
	{name: "mtls-echo", platform: []string{"samples/mtls-echo/mtls-echo.yaml", "samples/curl/curl.yaml"}},
	{name: "health-check", platform: []string{"samples/health-check/liveness-http-same-port.yaml"}},
	{name: "ratelimit", platform: []string{"samples/ratelimit/rate-limit-service.yaml", "samples/httpbin/httpbin.yaml"}},
	{name: "jwt-server", platform: []string{"samples/jwt-server/jwt-server.yaml", "samples/curl/curl.yaml"}},
}

// Samples reads Istio's samples as bundles: each configuration file on
// top of its sample's workloads; a sample without configuration files is
// its workloads alone.
func Samples(istioDir string) ([]Entry, error) {
	var out []Entry
	for _, b := range bundles {
		var configs []string
		for _, g := range b.configs {
			files, err := filepath.Glob(filepath.Join(istioDir, g))
			if err != nil {
				return nil, err
			}
			configs = append(configs, files...)
		}
		sort.Strings(configs)
		if len(configs) == 0 {
			objs, err := readObjects(abs(istioDir, b.platform)...)
			if err != nil {
				return nil, err
			}
			out = append(out, Entry{Name: "istio:samples/" + b.name, Source: SourceSamples, Objects: objs})
			continue
		}
		for _, c := range configs {
			files := abs(istioDir, b.platform)
			files = append(files, abs(istioDir, b.needsFor(filepath.Base(c)))...)
			files = append(files, c)
			objs, err := readObjects(dedupe(files)...)
			if err != nil {
				return nil, err
			}
			rel, _ := filepath.Rel(istioDir, c)
			name := "istio:" + rel
			if b.name == "bookinfo-mtls" {
				name += " (with destination-rule-all-mtls)"
			}
			out = append(out, Entry{Name: name, Source: SourceSamples, Objects: objs})
		}
	}
	return out, nil
}

// needsFor returns the files of the longest needs prefix of a file name.
func (b bundle) needsFor(base string) []string {
	best, found := "", false
	for p := range b.needs {
		if strings.HasPrefix(base, p) && (!found || len(p) > len(best)) {
			best, found = p, true
		}
	}
	if !found {
		return nil
	}
	var out []string
	for _, f := range b.needs[best] {
		if filepath.Base(f) != base {
			out = append(out, f)
		}
	}
	return out
}

func abs(dir string, rel []string) []string {
	out := make([]string, len(rel))
	for i, r := range rel {
		out[i] = filepath.Join(dir, r)
	}
	return out
}

func dedupe(files []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}
