package gen

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"weak"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// A scripted generation: each op is "put A=1 B=2" (reuseAll of one
// slice), "add A=1" (add), "del A" (remove) or "has A" (a question only a
// map answers).
type script []string

func route(name, content string) *Resource {
	return rawResource(name, RouteType, []byte(name+"="+content))
}

func (s script) run(t *testing.T, b *builder) (answers []bool) {
	t.Helper()
	for _, op := range s {
		verb, args, _ := strings.Cut(op, " ")
		switch verb {
		case "put":
			var rs []*Resource
			for _, kv := range strings.Fields(args) {
				n, c, _ := strings.Cut(kv, "=")
				rs = append(rs, route(n, c))
			}
			b.reuseAll(rs)
		case "add":
			n, c, _ := strings.Cut(args, "=")
			b.add(n, &routev3.RouteConfiguration{Name: n, VirtualHosts: []*routev3.VirtualHost{{Name: c, Domains: []string{"*"}}}})
		case "del":
			b.remove(args)
		case "has":
			answers = append(answers, b.has(args))
		default:
			t.Fatalf("bad op %q", op)
		}
	}
	return answers
}

// TestBuilderReplayEqualsFresh: a builder that replays the previous
// generation's log ends with what a builder without one ends with, names
// what changed, and keeps no map while it only substitutes contents.
func TestBuilderReplayEqualsFresh(t *testing.T) {
	for _, tc := range []struct {
		name       string
		prev, next script
		// mapless: the replaying builder never fills a map.
		mapless bool
	}{
		{"same", script{"put A=1 B=1", "put C=1", "add D=1", "del B"}, script{"put A=1 B=1", "put C=1", "add D=1", "del B"}, true},
		{"contents", script{"put A=1 B=1", "put C=1", "add D=1"}, script{"put A=1 B=2", "put C=1", "add D=2"}, true},
		{"taken out after", script{"put A=1 B=1", "del B"}, script{"put A=1 B=5", "del B"}, true},
		// A name put in twice: its contents are the last operation's.
		{"put twice", script{"put A=1", "put A=2"}, script{"put A=9", "put A=2"}, false},
		{"put again after taken out", script{"put A=1", "del A", "put A=3"}, script{"put A=7", "del A", "put A=3"}, false},
		{"other names", script{"put A=1 B=1", "put C=1"}, script{"put A=1 E=1", "put C=1"}, false},
		// Operations put in between the log's, and operations of the log
		// that do not come (builder_edit.go): followed without a map.
		{"one more", script{"put A=1"}, script{"put A=1", "put B=1"}, true},
		{"one fewer", script{"put A=1", "put B=1"}, script{"put A=1"}, true},
		{"one more first", script{"put B=1", "put C=1"}, script{"put A=1", "put B=1", "put C=1"}, true},
		{"one more between", script{"put A=1 B=1", "put E=1", "add F=1"}, script{"put A=1 B=1", "put C=1 D=1", "put E=1", "add F=1"}, true},
		{"one added between", script{"put A=1", "put C=1"}, script{"put A=1", "add B=1", "put C=1"}, true},
		{"one fewer between", script{"put A=1 B=1", "put C=1 D=1", "put E=1", "add F=1"}, script{"put A=1 B=1", "put E=1", "add F=1"}, true},
		{"one fewer first", script{"put A=1", "put B=1", "put C=1"}, script{"put B=1", "put C=1"}, true},
		{"asked a name none has", script{"put A=1", "put B=1"}, script{"put A=1", "has X", "put B=1"}, true},
		{"asked a name put between", script{"put A=1", "put C=1"}, script{"put A=1", "put B=1", "has B", "has C", "put C=1"}, true},
		// A name of the previous set is held once the operation that
		// put it in is done, unless it was skipped (logMemo.opOf).
		{"asked a name not put yet", script{"put A=1", "put B=1"}, script{"has B", "put A=1", "has B", "put B=1", "has B"}, true},
		{"asked a name of a skipped operation", script{"put A=1", "put B=1", "put C=1"}, script{"put A=1", "put C=1", "has B", "has C"}, true},
		{"asked after a substitution", script{"put A=1 B=1", "put C=1"}, script{"put A=2 B=1", "has A", "has C", "put C=1"}, true},
		{"several fewer", script{"put A=1", "put B=1", "put C=1", "put D=1", "put E=1"}, script{"put A=1", "put E=1"}, true},
		{"more and fewer, contents", script{"put A=1", "put B=1", "put C=1", "add D=1"}, script{"put A=2", "put X=1", "put C=1", "put Y=1 Z=1", "add D=3", "add W=1"}, true},
		// What an edit cannot follow: the builder fills its map.
		{"moved later", script{"put A=1", "put B=1", "put C=1"}, script{"put B=1", "put C=1", "put A=1"}, false},
		{"put between, then again", script{"put A=1", "put C=1"}, script{"put A=1", "put B=1", "put C=1", "put B=2"}, false},
		{"added between, then again", script{"put A=1", "put C=1"}, script{"put A=1", "add B=1", "put C=1", "add B=2"}, false},
		{"put between twice in one", script{"put A=1"}, script{"put A=1", "put B=1 B=2"}, false},
		{"skipped, then again", script{"put A=1", "put B=1", "put C=1"}, script{"put A=1", "put C=1", "put B=1"}, false},
		{"taken out in the log", script{"put A=1", "put B=1", "del B"}, script{"put A=1", "put X=1", "put B=1", "del B"}, false},
		{"taken out in the log, put between", script{"put A=1", "put B=1", "del B"}, script{"put A=1", "put B=1", "put B=2", "del B"}, false},
		{"taken out in the log, put before", script{"put A=1", "put X=1", "del X"}, script{"put X=2", "put A=1", "put X=1", "del X"}, false},
		{"rewrites in the log", script{"put A=1", "put A=2"}, script{"put X=1", "put A=1", "put A=2"}, false},
		{"too far to skip", script{"put A=1", "put B=1", "put C=1", "put D=1", "put E=1", "put F=1", "put G=1", "put H=1", "put I=1", "put J=1", "put K=1"}, script{"put A=1", "put K=1"}, false},
		{"asked", script{"put A=1", "has A", "put B=1"}, script{"put A=1", "has A", "put B=2"}, true},
		{"asked, in a log that takes out", script{"put A=1", "del A", "put B=1"}, script{"put A=1", "has A", "del A", "put B=1"}, false},
		{"added twice", script{"put A=1", "add B=1"}, script{"put A=1", "add A=2"}, false},
		{"added where taken", script{"add A=1", "add B=1"}, script{"add A=1", "add A=1"}, false},
		// A few names of many come and go: the set is patched from the
		// previous one (setPatched).
		{"patched", script{"put A=1 B=1 C=1 D=1 E=1 F=1 G=1 H=1"}, script{"put A=1 B=2 C=1 E=1 F=1 G=1 H=1 I=1"}, false},
		{"patched, first and last", script{"put B=1 C=1 D=1 E=1 F=1 G=1 H=1 I=1"}, script{"put A=1 C=1 D=1 E=1 F=1 G=1 H=1 J=1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(RouteType)
			tc.prev.run(t, b)
			prev, _, _ := b.setFrom(nil)
			log := b.log

			r := newBuilder(RouteType)
			r.replaying(&log, prev)
			asked := tc.next.run(t, r)
			got, changed, known := r.setFrom(prev)
			if tc.mapless && r.out != nil {
				t.Errorf("the replaying builder filled a map")
			}
			if !tc.mapless && r.out == nil {
				t.Errorf("the replaying builder followed what it cannot: no map")
			}

			f := newBuilder(RouteType)
			if answered := tc.next.run(t, f); !slices.Equal(asked, answered) {
				t.Errorf("has answered %v replaying, %v fresh", asked, answered)
			}
			want := f.set()
			checkSet(t, got)
			checkSet(t, want)
			if got.Version != want.Version || !slices.Equal(contents(got), contents(want)) {
				t.Errorf("replayed %v, fresh %v", contents(got), contents(want))
			}
			if known {
				diff := diffNames(prev, want)
				if !slices.Equal(slices.Sorted(slices.Values(changed)), slices.Sorted(slices.Values(diff))) {
					t.Errorf("changed %v, want %v", changed, diff)
				}
			}
			if len(r.errs) != len(f.errs) {
				t.Errorf("replayed errors %v, fresh %v", r.errs, f.errs)
			}
			if r.log.rewrites != f.log.rewrites {
				t.Errorf("replayed rewrites %v, fresh %v", r.log.rewrites, f.log.rewrites)
			}
			// The log the replaying builder leaves is the fresh one's: the
			// next generation, the same again, follows it to the same set.
			if got, want := logOf(r.log), logOf(f.log); !slices.Equal(got, want) {
				t.Errorf("replayed log %v, fresh %v", got, want)
			}
			rlog := r.log
			again := newBuilder(RouteType)
			again.replaying(&rlog, got)
			tc.next.run(t, again)
			set, _, _ := again.setFrom(got)
			if set.Version != got.Version || tc.mapless && (set != got || again.out != nil) {
				t.Errorf("the same generation again: set %v, the last %v; map filled %v", contents(set), contents(got), again.out != nil)
			}
		})
	}
}

// TestEditsOfOneSetShareTheirResult: builders that follow the same log
// through the same edit of the same set (M1's namespace classes after a
// service is added or removed) are given the set the first made; an edit
// that differs in what it puts in, skips or substitutes is made anew,
// and each is what a fresh builder makes.
func TestEditsOfOneSetShareTheirResult(t *testing.T) {
	b := newBuilder(RouteType)
	script{"put A=1", "put B=1", "put C=1", "put D=1"}.run(t, b)
	prev, _, _ := b.setFrom(nil)
	// A class's log is pooled (builder_log_pool.go), and keeps its last
	// edit as the set does.
	log := logsPool.of(b.log)
	edit := func(next script) (*Set, []buildOp) {
		t.Helper()
		r := newBuilder(RouteType)
		r.replaying(log, prev)
		next.run(t, r)
		got, _, _ := r.setFrom(prev)
		if r.out != nil {
			t.Fatalf("%v: the builder filled a map, the test shows nothing", next)
		}
		f := newBuilder(RouteType)
		next.run(t, f)
		want := f.set()
		checkSet(t, got)
		if got.Version != want.Version || !slices.Equal(contents(got), contents(want)) {
			t.Errorf("%v: edited %v, fresh %v", next, contents(got), contents(want))
		}
		if got, want := logOf(r.log), logOf(f.log); !slices.Equal(got, want) {
			t.Errorf("%v: edited log %v, fresh %v", next, got, want)
		}
		return got, r.log.ops
	}
	inserted := script{"put A=1", "put X=1", "put B=1", "put C=1", "put D=1"}
	first, firstLog := edit(inserted)
	// The script makes its resources again, found equal in the pool of
	// resources (the same ones); what it puts in between is one resource
	// (sameOp).
	again, againLog := edit(inserted)
	if again != first {
		t.Error("the same edit again was made anew")
	}
	if &againLog[0] != &firstLog[0] {
		t.Error("the same edit again made its log anew")
	}
	// A set keeps its last edit: each of these is compared with the one
	// before it.
	for _, next := range []script{
		{"put A=1", "put X=2", "put B=1", "put C=1", "put D=1"}, // other contents put in
		{"put A=1", "put Y=1", "put B=1", "put C=1", "put D=1"}, // another put in
		{"put A=2", "put X=1", "put B=1", "put C=1", "put D=1"}, // a substitution more
		{"put A=3", "put X=1", "put B=1", "put C=1", "put D=1"}, // another substitution
		{"put A=1", "put C=1", "put D=1"},                       // B skipped
		{"put A=1", "put B=1", "put D=1"},                       // C skipped instead
		{"put A=1", "put X=1", "put B=1", "put D=1"},            // put in and skipped
	} {
		if got, _ := edit(next); got == first {
			t.Errorf("%v: given the result of %v", next, inserted)
		}
	}
}

// Builders that follow a pooled log through the same edit of the same
// resources are given the log the first made; an equal log is pooled
// once.
func TestEditsOfOneLogShareTheirResult(t *testing.T) {
	a, bb, c, d, x, y := route("A", "1"), route("B", "1"), route("C", "1"), route("D", "1"), route("X", "1"), route("Y", "1")
	build := func(ops ...[]*Resource) *builder {
		b := newBuilder(RouteType)
		for _, rs := range ops {
			b.reuseAll(rs)
		}
		return b
	}
	ab := []*Resource{a, bb} // a unit's slice
	b := build(ab, []*Resource{c}, []*Resource{d})
	prev, _, _ := b.setFrom(nil)
	log := logsPool.of(b.log)
	if again := logsPool.of(build(ab, []*Resource{c}, []*Resource{d}).log); again != log {
		t.Error("an equal log was pooled twice")
	}
	if other := logsPool.of(build([]*Resource{a, bb}, []*Resource{c}, []*Resource{d}).log); other == log {
		t.Error("a log of the same resources in another slice was given the pooled one")
	}
	follow := func(ops ...[]*Resource) []buildOp {
		t.Helper()
		r := newBuilder(RouteType)
		r.replaying(log, prev)
		for _, rs := range ops {
			r.reuseAll(rs)
		}
		r.setFrom(prev)
		if r.out != nil {
			t.Fatal("the builder filled a map, the test shows nothing")
		}
		return r.log.ops
	}
	xs := []*Resource{x}
	first := follow([]*Resource{a, bb}, xs, []*Resource{c}, []*Resource{d})
	if again := follow([]*Resource{a, bb}, xs, []*Resource{c}, []*Resource{d}); &again[0] != &first[0] {
		t.Error("the same edit again made its log anew")
	}
	for what, ops := range map[string][][]*Resource{
		"another put in":   {{a, bb}, {y}, {c}, {d}},
		"put in elsewhere": {{a, bb}, {c}, xs, {d}},
		"skipped":          {{a, bb}, {d}},
	} {
		got := follow(ops...)
		fresh := build(ops...)
		if !slices.Equal(logOf(buildLog{ops: got}), logOf(fresh.log)) {
			t.Errorf("%s: log %v, fresh %v", what, logOf(buildLog{ops: got}), logOf(fresh.log))
		}
		if &got[0] == &first[0] {
			t.Errorf("%s: given the first edit's log", what)
		}
	}
}

// checkSet requires of a builder's set what its lookups rely on: its
// names sorted and unique, each resource at its name's place, and its
// sum that of its contents.
func checkSet(t *testing.T, s *Set) {
	t.Helper()
	if len(s.rs) != len(s.Names) {
		t.Fatalf("%d resources, %d names", len(s.rs), len(s.Names))
	}
	var sum uint64
	for i, n := range s.Names {
		if i > 0 && s.Names[i-1] >= n {
			t.Errorf("names not sorted and unique: %q then %q", s.Names[i-1], n)
		}
		if s.rs[i].Name != n {
			t.Errorf("resource %q at the place of %q", s.rs[i].Name, n)
		}
		if s.at(n) != s.rs[i] {
			t.Errorf("%q not found at its place", n)
		}
		sum += entryHash(n, s.rs[i])
	}
	if sum != s.sum {
		t.Errorf("sum %x, contents %x", s.sum, sum)
	}
	if s.at("~absent") != nil || s.at("") != nil {
		t.Errorf("an absent name found")
	}
}

// logOf lists a log's operations: the names and contents each put in,
// or the name it took out.
func logOf(l buildLog) []string {
	var out []string
	for _, op := range l.ops {
		if op.rs == nil {
			out = append(out, "del "+op.del)
			continue
		}
		var kv []string
		for _, r := range op.rs {
			kv = append(kv, r.Name+"="+r.Hash[:6])
		}
		out = append(out, strings.Join(kv, " "))
	}
	return out
}

func contents(s *Set) []string {
	var out []string
	for _, n := range s.Names {
		out = append(out, fmt.Sprintf("%s:%s", n, s.at(n).Hash[:6]))
	}
	return out
}

// TestGenerationsDoNotKeepTheirPredecessors: a class's configuration
// keeps its builders' logs for the next generation, and a builder follows
// the previous generation's; neither may keep the generations before it
// alive (a pointer into the builder kept every previous builder, its map
// and its set).
func TestGenerationsDoNotKeepTheirPredecessors(t *testing.T) {
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(20, 2, 2)...); err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	p := sidecar(t, "ns-0")
	edit := func(i int) *model.World {
		if _, err := store.Apply(vsEvent("ns-1", "svc-1", "svc-1", fmt.Sprint(i), int32(1+i), 50)); err != nil {
			t.Fatal(err)
		}
		return store.World()
	}
	first, err := g.Class(edit(0), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	routes := weak.Make(first.Sets[RouteType])
	cur := first
	first = nil
	for i := 1; i <= 4; i++ {
		if cur, err = g.Class(edit(i), p, cur); err != nil {
			t.Fatal(err)
		}
		if len(cur.Changed[RouteType]) == 0 {
			t.Fatalf("edit %d changed no route", i)
		}
	}
	runtime.GC()
	runtime.GC()
	if routes.Value() != nil {
		t.Errorf("the first generation's routes are alive four generations later")
	}
	runtime.KeepAlive(cur)
}
