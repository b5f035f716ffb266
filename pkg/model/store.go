package model

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshplane/discovery/pkg/model/gatewayapi"
)

// StoreOptions configure a Store.
type StoreOptions struct {
	// DomainSuffix is the cluster's DNS suffix, cluster.local by default.
	DomainSuffix string
}

// Store turns Events into Worlds. Apply may be called from many sources at
// once; each call publishes at most one new World.
type Store struct {
	domainSuffix string

	mu         sync.Mutex
	world      atomic.Pointer[World]
	handlers   []func(*Update)
	slices     map[NamespacedName]map[string]*discoveryv1.EndpointSlice // service -> slice name -> slice
	sliceOwner map[NamespacedName]NamespacedName                        // slice -> service
	podRefs    map[NamespacedName]map[NamespacedName]int                // pod -> services -> references
	configRVs  map[Key]string
	// derived are the keys of the Istio configs derived from the Gateway
	// API now in the World.
	derived map[Key]bool
	// secrets says what a certificateRef's Secret holds (SetSecrets).
	secrets func(ns, name string) gatewayapi.CertificateState
}

// NewStore returns a Store holding an empty World.
func NewStore(opts StoreOptions) *Store {
	if opts.DomainSuffix == "" {
		opts.DomainSuffix = "cluster.local"
	}
	s := &Store{
		domainSuffix: opts.DomainSuffix,
		slices:       map[NamespacedName]map[string]*discoveryv1.EndpointSlice{},
		sliceOwner:   map[NamespacedName]NamespacedName{},
		podRefs:      map[NamespacedName]map[NamespacedName]int{},
		configRVs:    map[Key]string{},
		derived:      map[Key]bool{},
	}
	s.world.Store(&World{
		DomainSuffix: opts.DomainSuffix,
		services:     map[NamespacedName]*Service{},
		byHost:       map[string]*Service{},
		endpoints:    map[NamespacedName]*ServiceEndpoints{},
		pods:         map[NamespacedName]*Pod{},
		podsByIP:     map[string]*Pod{},
		namespaces:   map[string]*Namespace{},
		nodes:        map[string]*Node{},
		configs:      map[Kind]map[NamespacedName]*Config{},
		log:          &changeLog{},
	})
	return s
}

// World returns the current World. It never returns nil.
func (s *Store) World() *World { return s.world.Load() }

// Subscribe registers fn to receive every Update, in order. fn runs while
// the Store is locked: it must return quickly and must not call Apply.
func (s *Store) Subscribe(fn func(*Update)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers = append(s.handlers, fn)
}

// ErrWrongType is returned for an Event whose Object is not the type its
// kind requires; such events are skipped, the others still apply.
var ErrWrongType = errors.New("object has the wrong type for its kind")

// Apply applies events in order and, if anything changed, publishes a new
// World and hands the Update to every subscriber. Events that change
// nothing (an informer resync, a Pod status change that the mesh does not
// see) publish nothing. It returns the Update, or nil when nothing changed.
func (s *Store) Apply(events ...Event) (*Update, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := newBuilder(s, s.world.Load())
	var errs []error
	for _, ev := range events {
		if err := b.apply(ev); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ev.Key, err))
		}
	}
	b.rebuildEndpoints()
	b.rebuildServiceEntries()
	b.rebuildGatewayAPI()
	return s.publish(b), errors.Join(errs...)
}

// publish makes b's World the current one and hands its Update to every
// subscriber; nil when nothing changed. s.mu is held.
func (s *Store) publish(b *builder) *Update {
	if len(b.changes) == 0 {
		return nil
	}
	b.w.Version++
	b.w.log.add(b.w.Version, b.changes)
	kinds := map[Kind]bool{}
	for name := range b.cloned {
		if k, ok := strings.CutPrefix(name, "configs/"); ok {
			kinds[Kind(k)] = true
		}
	}
	b.w.sorted = b.w.sorted.next(b.cloned["services"], kinds)
	u := &Update{World: b.w, Changes: b.changes}
	s.world.Store(b.w)
	for _, h := range s.handlers {
		h(u)
	}
	return u
}

// builder makes the next World, cloning each of the previous World's maps
// only the first time it changes.
type builder struct {
	s       *Store
	w       *World
	cloned  map[string]bool
	dirty   map[NamespacedName]bool // services whose endpoints need a rebuild
	changes []Change
	// gatewayDirty asks for the Gateway API to be translated again (a
	// user's object took or left the key of a derived one).
	gatewayDirty bool
}

func newBuilder(s *Store, prev *World) *builder {
	w := *prev
	return &builder{s: s, w: &w, cloned: map[string]bool{}, dirty: map[NamespacedName]bool{}}
}

func cow[K comparable, V any](b *builder, name string, m *map[K]V) {
	if !b.cloned[name] {
		*m = maps.Clone(*m)
		b.cloned[name] = true
	}
}

func (b *builder) changed(k Key, op Op) { b.changes = append(b.changes, Change{Key: k, Op: op}) }

func (b *builder) apply(ev Event) error {
	if ev.Op == OpUpsert && ev.Object == nil {
		return fmt.Errorf("upsert without an object")
	}
	switch ev.Key.Kind {
	case KindService:
		return b.service(ev)
	case KindEndpointSlice:
		return b.endpointSlice(ev)
	case KindPod:
		return b.pod(ev)
	case KindNamespace:
		return b.namespace(ev)
	case KindNode:
		return b.node(ev)
	case KindMeshConfig:
		return b.meshConfig(ev)
	case KindJWKS:
		return b.jwksSet(ev)
	case KindConfigMap:
		// The MeshConfig watcher turns the mesh's ConfigMap into a
		// MeshConfig; no other ConfigMap shapes the mesh.
		return nil
	case KindCAConfigMap:
		return b.caConfigMap(ev)
	default:
		if ev.Key.Kind.IsConfig() {
			return b.config(ev)
		}
		return fmt.Errorf("unknown kind %q", ev.Key.Kind)
	}
}

func (b *builder) service(ev Event) error {
	nn := NamespacedName{ev.Key.Namespace, ev.Key.Name}
	old := b.w.services[nn]
	if ev.Op == OpDelete {
		if old == nil {
			return nil
		}
		cow(b, "services", &b.w.services)
		cow(b, "byHost", &b.w.byHost)
		delete(b.w.services, nn)
		delete(b.w.byHost, old.Hostname)
		b.changed(ev.Key, OpDelete)
		return nil
	}
	svc, ok := ev.Object.(*corev1.Service)
	if !ok {
		return fmt.Errorf("%w: %T", ErrWrongType, ev.Object)
	}
	m := convertService(svc, b.s.domainSuffix)
	if old != nil && reflect.DeepEqual(old, m) {
		return nil
	}
	cow(b, "services", &b.w.services)
	cow(b, "byHost", &b.w.byHost)
	b.w.services[nn] = m
	b.w.byHost[m.Hostname] = m
	b.changed(ev.Key, OpUpsert)
	return nil
}

func (b *builder) endpointSlice(ev Event) error {
	sliceNN := NamespacedName{ev.Key.Namespace, ev.Key.Name}
	// Forget the slice under its previous service, if any.
	if prevSvc, ok := b.s.sliceOwner[sliceNN]; ok {
		b.s.unindexSlice(prevSvc, sliceNN)
		b.dirty[prevSvc] = true
	}
	if ev.Op == OpDelete {
		b.changed(ev.Key, OpDelete)
		return nil
	}
	es, ok := ev.Object.(*discoveryv1.EndpointSlice)
	if !ok {
		return fmt.Errorf("%w: %T", ErrWrongType, ev.Object)
	}
	svcName := es.Labels[LabelServiceName]
	if svcName == "" {
		return nil // not managed for a Service: nothing routes to it
	}
	svcNN := NamespacedName{es.Namespace, svcName}
	b.s.indexSlice(svcNN, sliceNN, es)
	b.dirty[svcNN] = true
	b.changed(ev.Key, OpUpsert)
	return nil
}

func (s *Store) indexSlice(svc, slice NamespacedName, es *discoveryv1.EndpointSlice) {
	m := s.slices[svc]
	if m == nil {
		m = map[string]*discoveryv1.EndpointSlice{}
		s.slices[svc] = m
	}
	m[slice.Name] = es
	s.sliceOwner[slice] = svc
	for _, pod := range slicePods(es) {
		refs := s.podRefs[pod]
		if refs == nil {
			refs = map[NamespacedName]int{}
			s.podRefs[pod] = refs
		}
		refs[svc]++
	}
}

func (s *Store) unindexSlice(svc, slice NamespacedName) {
	es := s.slices[svc][slice.Name]
	delete(s.slices[svc], slice.Name)
	if len(s.slices[svc]) == 0 {
		delete(s.slices, svc)
	}
	delete(s.sliceOwner, slice)
	if es == nil {
		return
	}
	for _, pod := range slicePods(es) {
		refs := s.podRefs[pod]
		if refs[svc]--; refs[svc] <= 0 {
			delete(refs, svc)
		}
		if len(refs) == 0 {
			delete(s.podRefs, pod)
		}
	}
}

func slicePods(es *discoveryv1.EndpointSlice) []NamespacedName {
	var out []NamespacedName
	for _, e := range es.Endpoints {
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
			ns := e.TargetRef.Namespace
			if ns == "" {
				ns = es.Namespace
			}
			out = append(out, NamespacedName{ns, e.TargetRef.Name})
		}
	}
	return out
}

func (b *builder) pod(ev Event) error {
	nn := NamespacedName{ev.Key.Namespace, ev.Key.Name}
	old := b.w.pods[nn]
	var m *Pod
	if ev.Op == OpUpsert {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return fmt.Errorf("%w: %T", ErrWrongType, ev.Object)
		}
		m = convertPod(p)
		if old != nil && reflect.DeepEqual(old, m) {
			return nil
		}
	} else if old == nil {
		return nil
	}
	cow(b, "pods", &b.w.pods)
	cow(b, "podsByIP", &b.w.podsByIP)
	if old != nil {
		for _, ip := range old.IPs {
			if b.w.podsByIP[ip] == old {
				delete(b.w.podsByIP, ip)
			}
		}
	}
	if m == nil {
		delete(b.w.pods, nn)
	} else {
		b.w.pods[nn] = m
		for _, ip := range m.IPs {
			b.w.podsByIP[ip] = m
		}
	}
	for svc := range b.s.podRefs[nn] {
		b.dirty[svc] = true
	}
	b.changed(ev.Key, ev.Op)
	return nil
}

func (b *builder) namespace(ev Event) error {
	old := b.w.namespaces[ev.Key.Name]
	if ev.Op == OpDelete {
		if old == nil {
			return nil
		}
		cow(b, "namespaces", &b.w.namespaces)
		delete(b.w.namespaces, ev.Key.Name)
		b.changed(ev.Key, OpDelete)
		return nil
	}
	ns, ok := ev.Object.(*corev1.Namespace)
	if !ok {
		return fmt.Errorf("%w: %T", ErrWrongType, ev.Object)
	}
	m := convertNamespace(ns)
	if old != nil && reflect.DeepEqual(old, m) {
		return nil
	}
	cow(b, "namespaces", &b.w.namespaces)
	b.w.namespaces[m.Name] = m
	b.changed(ev.Key, OpUpsert)
	return nil
}

// node keeps a Node's locality; when it changes, the endpoints of the
// pods on the Node are rebuilt (their locality is the Node's).
func (b *builder) node(ev Event) error {
	old := b.w.nodes[ev.Key.Name]
	var m *Node
	if ev.Op == OpUpsert {
		n, ok := ev.Object.(*corev1.Node)
		if !ok {
			return fmt.Errorf("%w: %T", ErrWrongType, ev.Object)
		}
		m = convertNode(n)
		if old != nil && *old == *m {
			return nil
		}
	} else if old == nil {
		return nil
	}
	cow(b, "nodes", &b.w.nodes)
	if m == nil {
		delete(b.w.nodes, ev.Key.Name)
	} else {
		b.w.nodes[m.Name] = m
	}
	for svc, slices := range b.s.slices {
		if b.dirty[svc] {
			continue
		}
	slices:
		for _, es := range slices {
			for _, e := range es.Endpoints {
				if e.NodeName != nil && *e.NodeName == ev.Key.Name {
					b.dirty[svc] = true
					break slices
				}
				if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
					ns := e.TargetRef.Namespace
					if ns == "" {
						ns = es.Namespace
					}
					if p := b.w.pods[NamespacedName{ns, e.TargetRef.Name}]; p != nil && p.Node == ev.Key.Name {
						b.dirty[svc] = true
						break slices
					}
				}
			}
		}
	}
	b.changed(ev.Key, ev.Op)
	return nil
}

func (b *builder) config(ev Event) error {
	nn := NamespacedName{ev.Key.Namespace, ev.Key.Name}
	old := b.w.configs[ev.Key.Kind][nn]
	if b.s.derived[ev.Key] {
		// The key holds a derived config: a delete is not of it; an
		// upsert is the user's, which takes the key.
		if ev.Op == OpDelete {
			return nil
		}
		delete(b.s.derived, ev.Key)
		old = nil
	}
	if derivedName(ev.Key) {
		b.gatewayDirty = true
	}
	if ev.Op == OpDelete {
		if old == nil {
			return nil
		}
		b.cloneConfigs(ev.Key.Kind)
		delete(b.w.configs[ev.Key.Kind], nn)
		delete(b.s.configRVs, ev.Key)
		b.changed(ev.Key, OpDelete)
		return nil
	}
	if want := ev.Key.Kind.GroupVersionKind(); !isKind(ev.Object, want) {
		return fmt.Errorf("%w: %T", ErrWrongType, ev.Object)
	}
	// An informer resync hands the same resourceVersion again: skip it.
	rv := ""
	if acc, err := meta.Accessor(ev.Object); err == nil {
		rv = acc.GetResourceVersion()
	}
	if old != nil && rv != "" && b.s.configRVs[ev.Key] == rv {
		return nil
	}
	b.cloneConfigs(ev.Key.Kind)
	b.w.configs[ev.Key.Kind][nn] = &Config{Key: ev.Key, Object: ev.Object}
	b.s.configRVs[ev.Key] = rv
	b.changes = append(b.changes, Change{Key: ev.Key, Op: OpUpsert, StatusOnly: old != nil && specUnchanged(old.Object, ev.Object)})
	return nil
}

// specUnchanged reports whether cur differs from prev only where
// generation does not read: the same labels, annotations and spec
// (compared as protobuf messages when they are). A status write (discovery's
// own NACK and unsupported-field conditions among them) must not push:
// with --xds-push-wave it would release a class held after its first wave
// rejected a change.
func specUnchanged(prev, cur runtime.Object) bool {
	pa, err := meta.Accessor(prev)
	if err != nil {
		return false
	}
	ca, err := meta.Accessor(cur)
	if err != nil {
		return false
	}
	if !maps.Equal(pa.GetLabels(), ca.GetLabels()) || !maps.Equal(pa.GetAnnotations(), ca.GetAnnotations()) {
		return false
	}
	ps, ok := specOf(prev)
	if !ok {
		return false
	}
	cs, ok := specOf(cur)
	if !ok {
		return false
	}
	if pm, ok := ps.(proto.Message); ok {
		if cm, ok := cs.(proto.Message); ok {
			return proto.Equal(pm, cm)
		}
	}
	return reflect.DeepEqual(ps, cs)
}

// specOf is a pointer to o's Spec field, when o is a pointer to a struct
// with one.
func specOf(o runtime.Object) (any, bool) {
	v := reflect.ValueOf(o)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	f := v.Elem().FieldByName("Spec")
	if !f.IsValid() || !f.CanAddr() {
		return nil, false
	}
	return f.Addr().Interface(), true
}

func (b *builder) cloneConfigs(kind Kind) {
	cow(b, "configs", &b.w.configs)
	name := "configs/" + string(kind)
	if !b.cloned[name] {
		m := maps.Clone(b.w.configs[kind])
		if m == nil {
			m = map[NamespacedName]*Config{}
		}
		b.w.configs[kind] = m
		b.cloned[name] = true
	}
}

// rebuildEndpoints recomputes the endpoints of every service whose slices
// or pods changed, and records a KindEndpoints change where they differ.
func (b *builder) rebuildEndpoints() {
	for svc := range b.dirty {
		var eps []*Endpoint
		for _, es := range b.s.slices[svc] {
			eps = append(eps, sliceEndpoints(es, b.w.Pod, b.w.Node)...)
		}
		sortEndpoints(eps)
		old := b.w.endpoints[svc]
		key := Key{Kind: KindEndpoints, Namespace: svc.Namespace, Name: svc.Name}
		switch {
		case len(eps) == 0 && old == nil:
			continue
		case len(eps) == 0:
			cow(b, "endpoints", &b.w.endpoints)
			delete(b.w.endpoints, svc)
			b.changed(key, OpDelete)
		case old != nil && reflect.DeepEqual(old.Endpoints, eps):
			continue
		default:
			cow(b, "endpoints", &b.w.endpoints)
			b.w.endpoints[svc] = &ServiceEndpoints{Service: svc, Endpoints: eps}
			b.changed(key, OpUpsert)
		}
	}
}
