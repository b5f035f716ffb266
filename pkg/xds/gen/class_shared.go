package gen

import (
	"bytes"
	"strings"

	tracingv3 "github.com/envoyproxy/go-control-plane/envoy/type/tracing/v3"

	"github.com/meshplane/discovery/pkg/model"
)

// Classes whose listeners name no proxy (Options.SharedTags).
//
// A variant is its base's listeners with the base representative's
// service tags rewritten to its own (class_variant.go). The base's
// listeners still named its representative, and its namespace: at M1
// with injected labels and listeners per address, the 50 namespace
// classes held 2,000 listeners each that differed from the other
// classes' only in the istio.namespace tag, 212 of the 560 MB of heap
// after the changes (BENCHMARKS.md). The resource pool (resource.go)
// shares equal resources between classes, but these were not equal.
//
// With SharedTags, a class whose proxies are variants (its key ends in
// |tags=) is generated with placeholders for the values of all five
// service tags (placeholderTags), the namespace too. Its listeners then
// name no proxy and no namespace: the same listener of two namespaces'
// classes is the same bytes, one pooled resource, and the chains the
// next generation reuses (listener_memo.go, listener_address.go) are
// slices of it. Every proxy of the class, the representative too, is
// served a variant (push.Classes): the listeners with its own values
// written in, as a variant's have always been. Istio puts the
// values in each connection manager's tracing (buildServiceTags); where
// else a listener would carry them, nothing would rewrite them, so a
// class is generated so only when its listeners carry the placeholders
// exactly where the rewrite finds them (sharedHolds), else with its
// representative's values as before.
//
// Classes patched by EnvoyFilters or WasmPlugins are not generated so: a
// patch may read or write what the placeholders stand for.

// placeholderMark starts every placeholder and nothing a listener is
// otherwise built with: a NUL byte, then Istio's tag prefix.
const placeholderMark = "\x00istio."

// placeholderValues are the values a shared class's listeners carry for
// the service tags, by tag: the mark and the tag's name.
var placeholderValues = func() map[string]string {
	out := map[string]string{}
	for _, t := range serviceTags(&model.Proxy{}) {
		out[t.Tag] = "\x00" + t.Tag
	}
	return out
}()

// placeholderTags are serviceTags with the placeholders for values.
func placeholderTags() []*tracingv3.CustomTag {
	tags := serviceTags(&model.Proxy{})
	for i, t := range tags {
		tags[i] = literalTag(t.Tag, placeholderValues[t.Tag])
	}
	return tags
}

// allTagValues is the value of each service tag of p, the namespace too:
// what a variant of a shared class writes in.
func allTagValues(p *model.Proxy) map[string]string {
	out := map[string]string{}
	for _, t := range serviceTags(p) {
		out[t.Tag] = t.GetLiteral().GetValue()
	}
	return out
}

// sharable reports whether the class key's configuration may be
// generated with placeholders: its proxies are variants, and no
// EnvoyFilter or WasmPlugin applies.
func sharable(key string) bool {
	base, tags := VariantOf(key)
	return tags != "" && !strings.Contains(base, "|ef=") && !strings.Contains(base, "|wasm=")
}

// Shared reports whether c was generated with placeholders for the
// service tags: none of its proxies is served it, only variants of it
// (Generator.Variant), its representative's too.
func (c *ClassConfig) Shared() bool { return c != nil && c.shared }

// sharedHolds reports whether the listeners names of s (every listener
// when names is nil), generated with placeholders, carry them exactly
// where a variant rewrites them: in the tracing of connection managers
// that have Istio's tags (retagPlan), and nowhere else.
func sharedHolds(s *Set, names []string) bool {
	if s == nil {
		return true
	}
	info := s.retagInfoOf(placeholderValues)
	if info.err != nil {
		return false
	}
	if names == nil {
		names = s.Names
	}
	for _, n := range names {
		r := s.at(n)
		if r == nil {
			continue // removed
		}
		want := 0
		if plan := info.plans[n]; plan != nil {
			want = plan.values()
		}
		if bytes.Count(r.Wire().GetValue(), []byte(placeholderMark)) != want {
			return false
		}
	}
	return true
}

// values counts the tag values p rewrites: each tracing's, as many
// times as the listener holds it.
func (p *retagPlan) values() int {
	var count func(spans []*span, plan *retagPlan) int
	count = func(spans []*span, plan *retagPlan) int {
		n := 0
		for _, s := range spans {
			switch {
			case s.blob >= 0:
				sub := plan.blobs[s.blob].plan
				n += count(sub.spans, sub)
			case s.children == nil:
				n++
			default:
				n += count(s.children, plan)
			}
		}
		return n
	}
	return count(p.spans, p)
}
