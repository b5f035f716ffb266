package server

import (
	"bytes"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// A class's set written whole is byte for byte the response that
// writes its resources one by one.
func TestWholeSetIsWrittenAsItsResources(t *testing.T) {
	for _, typ := range []string{gen.ClusterType, gen.EndpointType, gen.RouteType} {
		res := classResources(t, 30, typ)
		set := classSet(t, 30, typ)
		resp := &discovery.DeltaDiscoveryResponse{TypeUrl: typ, SystemVersionInfo: "v1", Nonce: "7"}
		want, err := Codec().Marshal(&deltaWire{resp: resp, send: res})
		if err != nil {
			t.Fatal(err)
		}
		ws := wholeOf(set, nil)
		got, err := Codec().Marshal(&deltaWire{resp: resp, whole: ws})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want.Materialize()) {
			t.Errorf("%s: the whole set's response differs from its resources written one by one", gen.ShortType(typ))
		}
		if len(ws.names) != len(res) {
			t.Errorf("%s: the whole set names %d resources, want %d", gen.ShortType(typ), len(ws.names), len(res))
		}
		size := 0
		for _, r := range res {
			size += r.Size()
		}
		if ws.size != size {
			t.Errorf("%s: the whole set's size is %d, want %d", gen.ShortType(typ), ws.size, size)
		}
	}
}

// A variant's listeners (a view) written whole are byte for byte the
// response that writes each one as Get makes it: small listeners from
// their plans, large ones (a port listener of 300 services) made once
// for the view.
func TestViewIsWrittenWholeAsItsListeners(t *testing.T) {
	for _, services := range []int{8, 300} {
		set := ratingsVariant(t, services).Sets[gen.ListenerType]
		if !set.IsView() {
			t.Fatal("the variant's listeners are not a view")
		}
		var send []*gen.Resource
		size, big := 0, 0
		for _, n := range set.Names {
			r := set.Get(n)
			send = append(send, r)
			size += r.Size()
			if r.Size() >= 32<<10 {
				big++
			}
		}
		if services == 300 && big == 0 {
			t.Fatal("no listener of 32 KB or more: the test needs one")
		}
		resp := &discovery.DeltaDiscoveryResponse{TypeUrl: gen.ListenerType, SystemVersionInfo: "v1", Nonce: "2"}
		want, err := Codec().Marshal(&deltaWire{resp: resp, send: send})
		if err != nil {
			t.Fatal(err)
		}
		got, err := Codec().Marshal(&deltaWire{resp: resp, view: set})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want.Materialize()) {
			t.Errorf("%d services: the view written whole differs from its listeners written one by one", services)
		}
		if set.Size() != size {
			t.Errorf("%d services: the view's size is %d, want %d", services, set.Size(), size)
		}
		// WholeShape bounds what WriteAll writes, as the codec sizes its
		// buffers by it.
		var cw countingWriter
		set.WriteAll(&cw)
		copied, shared, heads := set.WholeShape(inlineBelow)
		if cw.copied > copied || cw.shared != shared || cw.heads != heads {
			t.Errorf("%d services: WriteAll copied %d bytes, shared %d parts and named %d bytes; WholeShape says at most %d, %d and %d", services, cw.copied, cw.shared, cw.heads, copied, shared, heads)
		}
		if cw.resources != set.Len() {
			t.Errorf("%d services: WriteAll wrote %d resources, want %d", services, cw.resources, set.Len())
		}
		// The codec's buffers are sized once, for what it writes: not
		// grown as parts come (twice what is needed then), nor reserved
		// twice over.
		var sw sliceWriter
		if err := sw.delta(resp, nil, set, nil); err != nil {
			t.Fatal(err)
		}
		if n := len(sw.parts); sw.reserved < n || sw.reserved > n+n/2+8 {
			t.Errorf("%d services: %d buffers written, %d reserved", services, n, sw.reserved)
		}
	}
}

// countingWriter counts what a gen.SetWriter is given, as the codec
// would copy or share it.
type countingWriter struct{ copied, shared, resources, heads int }

func (w *countingWriter) Copy(b []byte) { w.copied += len(b) }
func (w *countingWriter) Share(b []byte) {
	if len(b) < inlineBelow {
		w.copied += len(b)
	} else {
		w.shared++
	}
}
func (w *countingWriter) Resource(name, version, suffix string, _ int) {
	w.resources++
	w.heads += len(name) + len(version) + len(suffix)
}

// classSet is the set of typeURL of sidecarID's class in a World of
// services.
func classSet(t testing.TB, services int, typeURL string) *gen.Set {
	t.Helper()
	p, err := model.ParseProxy(sidecarID, nil)
	if err != nil {
		t.Fatal(err)
	}
	cls, err := newGen(t).Class(meshStore(t, services).World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cls.Sets[typeURL]
}

// A stream's first response is its class's set whole where it is sent
// all of it: a wildcard CDS stream (with the proxy's own clusters beside
// the set) and an EDS stream naming exactly the class's endpoints. Each
// proxy gets what generation from nothing gives it, name, version and
// bytes. A stream naming part of the set is sent that part.
func TestFirstResponsesAreSentWhole(t *testing.T) {
	store := meshStore(t, 20)
	ts := startServer(t, store)
	g := newGen(t)
	// Workloads of svc-0 (ns-0, endpoints 10.1.0.1 and 10.1.0.2): they
	// have inbound clusters of their own.
	ids := []string{"sidecar~10.1.0.1~svc-0-a.ns-0~ns-0.svc.cluster.local", "sidecar~10.1.0.2~svc-0-b.ns-0~ns-0.svc.cluster.local"}
	meta := map[string]any{model.MetaLabels: map[string]any{"app": "svc-0"}}
	configOf := func(id string) *gen.ProxyConfig {
		p, err := model.ParseProxy(id, meta)
		if err != nil {
			t.Fatal(err)
		}
		cls, err := g.Class(store.World(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		return g.Proxy(store.World(), p, cls)
	}
	pc := configOf(ids[0])
	if len(pc.Own[gen.ClusterType].Names) == 0 {
		t.Fatal("the sidecar has no clusters of its own: the test needs some")
	}
	eds := pc.Class.Sets[gen.EndpointType].Names
	check := func(who string, r *discovery.DeltaDiscoveryResponse, typ string, names []string) {
		t.Helper()
		got := map[string]*discovery.Resource{}
		for _, res := range r.GetResources() {
			if _, dup := got[res.GetName()]; dup {
				t.Errorf("%s %s: %s sent twice", who, gen.ShortType(typ), res.GetName())
			}
			got[res.GetName()] = res
		}
		if len(got) != len(names) {
			t.Errorf("%s %s: %d resources sent, want %d", who, gen.ShortType(typ), len(got), len(names))
		}
		for _, n := range names {
			want := pc.Get(typ, n)
			res := got[n]
			switch {
			case res == nil:
				t.Errorf("%s %s: %s not sent", who, gen.ShortType(typ), n)
			case res.GetVersion() != want.Hash:
				t.Errorf("%s %s: %s sent at version %s, want %s", who, gen.ShortType(typ), n, res.GetVersion(), want.Hash)
			case res.GetResource().GetTypeUrl() != typ || !bytes.Equal(res.GetResource().GetValue(), want.Wire().GetValue()):
				t.Errorf("%s %s: %s sent with other bytes", who, gen.ShortType(typ), n)
			}
		}
	}
	// Two proxies of the class: the second is sent the encoding the
	// first was (or its equal, if it was collected in between).
	for i, id := range ids {
		who := fmt.Sprintf("proxy %d", i)
		pc = configOf(id)
		c := newDeltaClient(t, ts)
		c.send(&discovery.DeltaDiscoveryRequest{Node: node(id, meta), TypeUrl: gen.ClusterType})
		r := c.next()
		check(who, r, gen.ClusterType, pc.Names(gen.ClusterType))
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ClusterType, ResponseNonce: r.GetNonce()})
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResourceNamesSubscribe: eds})
		r = c.next()
		check(who, r, gen.EndpointType, eds)
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.EndpointType, ResponseNonce: r.GetNonce()})
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: gen.ListenerType})
		check(who, c.next(), gen.ListenerType, pc.Names(gen.ListenerType))
	}
	if got := ts.s.wholeSent.Load(); got != 6 {
		t.Errorf("%d responses sent a set whole, want 6 (two proxies' CDS, EDS and LDS)", got)
	}
	// Part of the endpoints, and a name the set does not have.
	part := append([]string{}, eds[:3]...)
	c := newDeltaClient(t, ts)
	c.send(&discovery.DeltaDiscoveryRequest{Node: node(sidecarID, nil), TypeUrl: gen.EndpointType, ResourceNamesSubscribe: append(part, "outbound|1||nowhere.ns-0.svc.cluster.local")})
	r := c.next()
	check("a proxy naming part of the set", r, gen.EndpointType, part)
	var names []string
	for _, res := range r.GetResources() {
		names = append(names, res.GetName())
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("resources sent out of name order: %v", names)
	}
	if got := ts.s.wholeSent.Load(); got != 6 {
		t.Errorf("%d responses sent a set whole, want still 6", got)
	}
}

// A set composed of its groups' encodings (composeWhole) carries the
// set's resources, each once, as the set has them; the classes of two
// namespaces share the encodings of the units one took from the other;
// and the encodings go when their groups do.
func TestComposedWholeIsTheSet(t *testing.T) {
	before := groupEncodings.len()
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(30, 4, 2)...); err != nil {
		t.Fatal(err)
	}
	g := newGen(t)
	composed := func(ns string) (*gen.Set, *wholeSet) {
		p, err := model.ParseProxy(fmt.Sprintf("sidecar~10.9.0.1~client.%s~%s.svc.cluster.local", ns, ns), nil)
		if err != nil {
			t.Fatal(err)
		}
		cls, err := g.Class(store.World(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		set := cls.Sets[gen.RouteType]
		groups := cls.Groups(gen.RouteType)
		if groups == nil {
			t.Fatalf("%s: the routes have no groups", ns)
		}
		return set, composeWhole(set, groups)
	}
	decode := func(ws *wholeSet) map[string]*discovery.Resource {
		resp := &discovery.DeltaDiscoveryResponse{TypeUrl: gen.RouteType, Nonce: "1"}
		bs, err := Codec().Marshal(&deltaWire{resp: resp, whole: ws})
		if err != nil {
			t.Fatal(err)
		}
		var got discovery.DeltaDiscoveryResponse
		if err := proto.Unmarshal(bs.Materialize(), &got); err != nil {
			t.Fatal(err)
		}
		out := map[string]*discovery.Resource{}
		for _, r := range got.GetResources() {
			if out[r.GetName()] != nil {
				t.Errorf("%s sent twice", r.GetName())
			}
			out[r.GetName()] = r
		}
		return out
	}
	setA, a := composed("ns-0")
	got := decode(a)
	if len(got) != setA.Len() {
		t.Errorf("composed routes carry %d resources, the set %d", len(got), setA.Len())
	}
	for n, r := range setA.All() {
		s := got[n]
		if s == nil || s.GetVersion() != r.Hash || !bytes.Equal(s.GetResource().GetValue(), r.Any.GetValue()) || s.GetResource().GetTypeUrl() != gen.RouteType {
			t.Errorf("%s: sent %v, the set's version %s", n, s, r.Hash)
		}
	}
	var sw sliceWriter
	if err := sw.delta(&discovery.DeltaDiscoveryResponse{TypeUrl: gen.RouteType}, a, nil, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(sw.parts); sw.reserved < n || sw.reserved > n+n/2+8 {
		t.Errorf("%d buffers written for %d groups, %d reserved", n, len(a.parts), sw.reserved)
	}
	_, b := composed("ns-1")
	parts := map[*byte]bool{}
	for _, p := range a.parts {
		parts[&p[0]] = true
	}
	shared := 0
	for _, p := range b.parts {
		if parts[&p[0]] {
			shared++
		}
	}
	if shared == 0 {
		t.Error("the namespaces' classes share no group's encoding")
	}
	if groupEncodings.len() <= before {
		t.Fatal("no group's encoding held")
	}
	// Nothing refers to the classes any more: their groups' encodings go.
	g, a, b = nil, nil, nil
	deadline := time.Now().Add(10 * time.Second)
	for groupEncodings.len() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d groups' encodings held after their classes went, %d before", groupEncodings.len(), before)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// A group's encoding is dropped once streams stop asking for it, while
// the group lives, and made again, equal, when one asks again; the
// group keeps one entry (and one cleanup) through it all.
func TestGroupEncodingsGoWhenUnused(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(30, 4, 2)...); err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy("sidecar~10.9.0.1~client.ns-0~ns-0.svc.cluster.local", nil)
	if err != nil {
		t.Fatal(err)
	}
	cls, err := newGen(t).Class(store.World(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	groups := cls.Groups(gen.RouteType)
	if len(groups) == 0 {
		t.Fatal("the routes have no groups")
	}
	// A period long enough that a stalled test goroutine (a loaded
	// machine, -race) does not miss one while it asks every 25 ms.
	gw := &groupWires{m: map[groupKey]*groupWire{}, idle: 500 * time.Millisecond}
	first := make([][]byte, len(groups))
	for i, g := range groups {
		first[i] = gw.of(gen.RouteType, g)
	}
	if gw.len() != len(groups) || gw.entries() != len(groups) {
		t.Fatalf("%d encodings held in %d entries, want %d", gw.len(), gw.entries(), len(groups))
	}
	// Asked for within every period, through three sweeps, an encoding
	// stays, the same bytes.
	for range 60 {
		time.Sleep(25 * time.Millisecond)
		if b := gw.of(gen.RouteType, groups[0]); &b[0] != &first[0][0] {
			t.Fatal("an encoding in use was made again")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for gw.len() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d unused encodings still held", gw.len(), len(groups))
		}
		gw.of(gen.RouteType, groups[0])
		time.Sleep(25 * time.Millisecond)
	}
	for gw.len() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the last encoding is still held unused")
		}
		time.Sleep(25 * time.Millisecond)
	}
	for i, g := range groups {
		if b := gw.of(gen.RouteType, g); !bytes.Equal(b, first[i]) {
			t.Errorf("group %d encoded again differs", i)
		}
	}
	if gw.entries() != len(groups) {
		t.Errorf("%d entries for %d groups", gw.entries(), len(groups))
	}
	runtime.KeepAlive(cls)
}

// The sets last sent whole are held while streams keep being sent them,
// and let go once none was for a sweep's period.
func TestRecentWholesLetGoWhenUnused(t *testing.T) {
	// A period long enough that a stalled test goroutine (a loaded
	// machine, -race) does not miss one while it keeps every 25 ms.
	r := &recentWholes{idle: 500 * time.Millisecond}
	sets := make([]*wholeSet, 3)
	for i := range sets {
		sets[i] = &wholeSet{b: []byte{byte(i)}}
		r.keep(sets[i])
	}
	if r.held() != len(sets) {
		t.Fatalf("%d sets held, want %d", r.held(), len(sets))
	}
	// Kept within every period, through three sweeps, a set stays.
	for range 60 {
		time.Sleep(25 * time.Millisecond)
		r.mu.Lock()
		kept := r.ring[0] == sets[0]
		r.mu.Unlock()
		if !kept {
			t.Fatal("a set in use was let go")
		}
		r.keep(sets[0])
	}
	if r.held() != 1 {
		t.Fatalf("%d sets held, want the one in use", r.held())
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.held() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the last set is still held unused")
		}
		time.Sleep(25 * time.Millisecond)
	}
	// Sent again, a set is held again, and the sweeps start again.
	r.keep(sets[1])
	if r.held() != 1 {
		t.Fatalf("%d sets held after one was kept again, want 1", r.held())
	}
	for r.held() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("a set kept again is never let go")
		}
		time.Sleep(25 * time.Millisecond)
	}
}
