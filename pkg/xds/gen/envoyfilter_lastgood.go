package gen

import (
	"sort"
	"strings"
	"sync"

	"github.com/meshplane/discovery/pkg/xds/envoyfilter"
)

// efLastGood remembers, for each resource EnvoyFilters patched, the last
// patched form that passed Envoy's rules and the hash of the resource it
// was made from. When a later version of the same EnvoyFilters makes that
// resource invalid, and generation built the same resource as before,
// the last good patched form is sent again (issue 18: "the last good one
// stays"): an edit that breaks a patch keeps what the proxies have, as
// Envoy keeps its last good configuration when it refuses one. When
// generation built something else, the old patched form may refer to
// what is gone, so the resource is sent as built, unpatched, as before.
//
// Entries are keyed by type, the class (its key without the EnvoyFilter
// versions, so that the next version of a filter finds its
// predecessor's result) or the proxy for its own resources, the resource
// name and the EnvoyFilters (namespace/name) that patched it. The map is
// bounded: past maxLogged entries it starts over, which only costs the
// fallback to the unpatched resource.
type efLastGood struct {
	mu sync.Mutex
	m  map[string]lastGood
}

type lastGood struct {
	base string // hash of the resource as built
	res  *Resource
}

func lastGoodKey(typeURL, where, name string, by envoyfilter.Applied) string {
	filters := make([]string, 0, len(by))
	for f := range by {
		filters = append(filters, f.Key())
	}
	sort.Strings(filters)
	return typeURL + "\x00" + withoutEnvoyFilters(where) + "\x00" + name + "\x00" + strings.Join(filters, ",")
}

// withoutEnvoyFilters strips the |ef= part of a class key (ClassKey).
func withoutEnvoyFilters(class string) string {
	i := strings.Index(class, "|ef=")
	if i < 0 {
		return class
	}
	rest := class[i+len("|ef="):]
	if j := strings.IndexByte(rest, '|'); j >= 0 {
		return class[:i] + rest[j:]
	}
	return class[:i]
}

func (l *efLastGood) put(key, base string, res *Resource) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) >= maxLogged {
		l.m = map[string]lastGood{}
	}
	l.m[key] = lastGood{base: base, res: res}
}

// get returns the last good patched resource of key if it was made from
// a resource of hash base.
func (l *efLastGood) get(key, base string) *Resource {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g, ok := l.m[key]; ok && g.base == base {
		return g.res
	}
	return nil
}
