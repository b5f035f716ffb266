package gen

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"iter"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type URLs of the resources generated here.
const (
	ClusterType  = resourcev3.ClusterType
	EndpointType = resourcev3.EndpointType
	ListenerType = resourcev3.ListenerType
	RouteType    = resourcev3.RouteType
)

// TypeURLs lists the generated types in the order ADS sends them: the
// extension configurations (ECDS, WasmPlugins: wasm.go) after the
// listeners that name them.
var TypeURLs = []string{ClusterType, EndpointType, ListenerType, RouteType, ExtensionConfigType}

// ShortType is the short name of a type URL used in metrics: cds, eds,
// lds, rds, sds or ecds ("other" for anything else).
func ShortType(typeURL string) string {
	switch typeURL {
	case ClusterType:
		return "cds"
	case EndpointType:
		return "eds"
	case ListenerType:
		return "lds"
	case RouteType:
		return "rds"
	case SecretType:
		return "sds"
	case ExtensionConfigType:
		return "ecds"
	}
	return "other"
}

// Resource is one validated resource, marshaled once and shared.
type Resource struct {
	Name string
	// Any is the resource marshaled; nil for a lazy resource. Wire
	// gives it either way: read it only where no lazy resource can be.
	Any *anypb.Any
	// Hash identifies the content; it is the resource's version in delta xDS.
	Hash string
	lazy *lazyWire
	// plan is where a base listener's service tags are (class_variant.go).
	plan atomic.Pointer[retagPlan]
}

// Size is the resource's marshaled size in bytes.
func (r *Resource) Size() int {
	if r.lazy != nil {
		return r.lazy.size
	}
	return len(r.Any.GetValue())
}

// Wire is the resource marshaled. A lazy resource's bytes are made again
// when the last ones were collected.
func (r *Resource) Wire() *anypb.Any {
	if r.lazy == nil {
		return r.Any
	}
	return r.lazy.get()
}

type validator interface{ ValidateAll() error }

var marshalOpts = proto.MarshalOptions{Deterministic: true}

// NewResource validates m with Envoy's field constraints and marshals it.
func NewResource(name, typeURL string, m proto.Message) (*Resource, error) {
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return nil, fmt.Errorf("validate %s %q: %w", ShortType(typeURL), name, err)
		}
	}
	b, err := marshalOpts.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %s %q: %w", ShortType(typeURL), name, err)
	}
	return rawResource(name, typeURL, b), nil
}

// rawResource is the Resource of marshaled bytes b, which the caller
// built from validated parts: the one already generated with the same
// name, type and bytes if it is still in use (see pool), else a new one
// of b. A caller that keeps slices of b takes them of the returned
// resource's bytes instead, at the same offsets.
func rawResource(name, typeURL string, b []byte) *Resource {
	sum := sha256.Sum256(b)
	return pool.intern(&Resource{Name: name, Any: &anypb.Any{TypeUrl: typeURL, Value: b}, Hash: hex.EncodeToString(sum[:12])})
}

// pool finds the resources in use by content, so that equal resources
// generated apart are one. Classes share a service's clusters and
// endpoints by construction (class_parts.go), but the rest of a class is
// built for it alone, and sidecar classes of different namespaces mostly
// build the same bytes: at M1 (50 namespaces) each class held its own
// copy of both 2 MB port listeners and of 2,000 RouteConfigurations, 300
// MB of the heap after connecting, and a service added made 50 new
// copies of the listeners, live until every proxy had its push. The
// pool holds its resources weakly: it keeps none alive.
//
// pkg/xds/server's namePool shares delta subscriptions the same way but
// forgets a collected set through runtime.AddCleanup: it holds hundreds
// of sets. This pool sees every resource generated (at M1 the 50
// classes build 100,000 routes, and as many address listeners per
// address), so it sweeps dead entries as it grows instead of
// registering a cleanup per resource.
var pool = resourcePool{m: newWeakMap[resourceKey, Resource](4096)}

type resourceKey struct{ typeURL, name, hash string }

type resourcePool struct {
	mu sync.Mutex
	m  weakMap[resourceKey, Resource]
}

// intern returns the pooled resource equal to r, pooling r if there is
// none. Equal means the same type, name and bytes: the hash finds the
// candidate, the bytes are compared.
func (p *resourcePool) intern(r *Resource) *Resource {
	k := resourceKey{r.Any.GetTypeUrl(), r.Name, r.Hash}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.m.get(k); old != nil && bytes.Equal(old.Any.GetValue(), r.Any.GetValue()) {
		return old
	}
	p.m.put(k, r)
	return r
}

// Set is every resource of one type, by name. A Set is never changed once
// built.
//
// A variant's listeners are a view of its base's (retagView): the set
// holds no resource of its own, and Get makes each when asked for. Read
// a set through Get, Hash, Len and All; rs is nil for a view and read
// directly only where the set is a builder's.
//
// A builder's set holds its resources in a slice in name order, beside
// Names, and finds a name by binary search. It held a map: at M1 the 50
// namespaces' classes' sets were 50 maps of 2,000 entries per type, 24 of
// the 162 MB of heap after 1,000 proxies connected, where a slice is a
// pointer per resource (BENCHMARKS.md, "Sets in name order").
type Set struct {
	TypeURL string
	// Version changes whenever any resource of the set changes.
	Version string
	// rs are the resources, rs[i] named Names[i]; nil for a view.
	rs []*Resource
	// view, when set, is what the set's resources are made from (rs is
	// nil): a variant's listeners (class_variant.go).
	view *retagView
	// Names are the resource names, sorted.
	Names []string
	// sum is the sum of entryHash over the resources; Version shows it.
	// A sum can be updated for the few resources a change replaces
	// instead of hashing thousands of names again.
	sum uint64
	// versions is built on first use (Versions).
	versions atomic.Pointer[Versions]
	// retag is what views of the set read of it (retagInfoOf): kept
	// with the set, built by the first variant made from it.
	retag atomic.Pointer[retagInfo]
	// edit is the last edit made of the set and its result
	// (builder_edit_memo.go).
	edit atomic.Pointer[setEdit]
}

// entryHash identifies one name and content. Resource hashes are
// SHA-256 based, so mixing their first 64 bits with the name is enough.
func entryHash(name string, r *Resource) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(r.Hash))
	x := h.Sum64()
	// A final mix (splitmix64) so that sums of near-equal values spread.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// NewSet builds a Set from resources (names must be unique).
func NewSet(typeURL string, rs map[string]*Resource) *Set {
	names := make([]string, 0, len(rs))
	var sum uint64
	for n, r := range rs {
		names = append(names, n)
		sum += entryHash(n, r)
	}
	sort.Strings(names)
	names = namesPool.of(names)
	return newSetSorted(typeURL, inOrder(rs, names), names, sum)
}

// inOrder lists the resources of rs named names, in that order.
func inOrder(rs map[string]*Resource, names []string) []*Resource {
	out := make([]*Resource, len(names))
	for i, n := range names {
		out[i] = rs[n]
	}
	return out
}

// newSetSorted builds a Set from resources rs named by names, sorted, and
// whose entryHash sum is sum.
func newSetSorted(typeURL string, rs []*Resource, names []string, sum uint64) *Set {
	return &Set{TypeURL: typeURL, rs: rs, Names: names, sum: sum, Version: strconv.FormatUint(sum, 16)}
}

// find returns where name is among a builder's set's names, and whether
// it is there.
func (s *Set) find(name string) (int, bool) {
	if s == nil {
		return 0, false
	}
	return findName(s.Names, name)
}

// findName is slices.BinarySearch for sorted names, without its generic
// compare.
func findName(names []string, name string) (int, bool) {
	lo, hi := 0, len(names)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if names[m] < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(names) && names[lo] == name
}

// at returns a builder's set's resource named name, or nil.
func (s *Set) at(name string) *Resource {
	if i, ok := s.find(name); ok {
		return s.rs[i]
	}
	return nil
}

// asMap returns a builder's set's resources by name, a new map.
func (s *Set) asMap() map[string]*Resource {
	m := make(map[string]*Resource, len(s.rs))
	for i, n := range s.Names {
		m[n] = s.rs[i]
	}
	return m
}

// replaced is s's sum with the resources of names, names of s, replaced
// by those of rs, the same names as s's in their order.
func (s *Set) replaced(rs []*Resource, names []string) uint64 {
	sum := s.sum
	for _, n := range names {
		if i, ok := s.find(n); ok {
			sum += entryHash(n, rs[i]) - entryHash(n, s.rs[i])
		}
	}
	return sum
}

// Get returns the resource named name, or nil. A view's resource is
// made for the call: callers compare resources by Hash, not by pointer.
func (s *Set) Get(name string) *Resource {
	switch {
	case s == nil:
		return nil
	case s.view != nil:
		return s.view.get(name)
	}
	return s.at(name)
}

// IsView reports whether the set is a view (a variant's listeners), whose
// resources are made when asked for.
func (s *Set) IsView() bool { return s != nil && s.view != nil }

// Name returns the set's own string for the resource named name, and
// false when it has none; like Hash it makes nothing. A stream keeps the
// names it subscribes to as this string, not its request's copy.
func (s *Set) Name(name string) (string, bool) {
	switch {
	case s == nil:
		return "", false
	case s.view != nil:
		s = s.view.base
	}
	r := s.at(name)
	if r == nil {
		return "", false
	}
	return r.Name, true
}

// Hash returns the version of the resource named name, and false when
// the set has none; a view makes no resource for it.
func (s *Set) Hash(name string) (string, bool) {
	switch {
	case s == nil:
		return "", false
	case s.view != nil:
		return s.view.hash(name)
	}
	r := s.at(name)
	if r == nil {
		return "", false
	}
	return r.Hash, true
}

// Len is the number of resources.
func (s *Set) Len() int {
	switch {
	case s == nil:
		return 0
	case s.view != nil:
		return s.view.base.Len()
	}
	return len(s.rs)
}

// All yields the resources in name order.
func (s *Set) All() iter.Seq2[string, *Resource] {
	return func(yield func(string, *Resource) bool) {
		if s == nil {
			return
		}
		for i, n := range s.Names {
			r := s.Get(n)
			if s.view == nil {
				r = s.rs[i]
			}
			if !yield(n, r) {
				return
			}
		}
	}
}

// Versions is what a Set says of its resources without holding them:
// their names and versions (Resource.Hash).
//
// A delta stream remembers the configuration it was last brought fully
// up to date with as Versions (pkg/xds/server). Holding the Set instead
// held every marshaled resource of that generation, and streams brought
// up to date at different times held different generations: at M1 each
// service added changes every class's 2 MB port listeners, and after ten
// service changes the listeners of six generations were 1.1 GB of heap.
type Versions struct {
	// names are the Set's, sorted.
	names []string
	// hashes are the versions of names, in their order (a builder's
	// set's: a slice, as the set's resources are).
	hashes []string
	// from, when set, versions every name that plain lacks: from's
	// version with suffix appended (a view's: retagView.versions). A
	// variant's 2,000 listeners per address would otherwise be 2,000
	// entries per workload.
	from   *Versions
	plain  map[string]string
	suffix string
	// memo is what Memo made of the resources, weakly held: a
	// weak.Pointer per type made.
	memoMu sync.Mutex
	memo   []any
}

// Versions returns the versions of s's resources, built once per Set
// and shared by its callers; nil for a nil Set.
func (s *Set) Versions() *Versions {
	if s == nil {
		return nil
	}
	if v := s.versions.Load(); v != nil {
		return v
	}
	var v *Versions
	if s.view != nil {
		v = s.view.versions(s)
	} else {
		v = versionsPool.of(s)
	}
	if !s.versions.CompareAndSwap(nil, v) {
		return s.versions.Load()
	}
	return v
}

// Hash returns the version of name, and false if the Set had no resource
// of that name.
func (v *Versions) Hash(name string) (string, bool) {
	if v == nil {
		return "", false
	}
	if v.from == nil {
		if i, ok := findName(v.names, name); ok {
			return v.hashes[i], true
		}
		return "", false
	}
	if h, ok := v.plain[name]; ok {
		return h, true
	}
	h, ok := v.from.Hash(name)
	if !ok {
		return "", false
	}
	return h + v.suffix, true
}

// Names returns the names, sorted. The caller must not change the slice.
func (v *Versions) Names() []string {
	if v == nil {
		return nil
	}
	return v.names
}

// Len is the number of names.
func (v *Versions) Len() int {
	if v == nil {
		return 0
	}
	return len(v.names)
}

// Bytes is the total marshaled size of the set.
func (s *Set) Bytes() int {
	n := 0
	for _, r := range s.All() {
		n += r.Size()
	}
	return n
}
