package gen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// worldAllowed are the functions of this package that may hold a
// *model.World or read past the recording views (newView, unrecorded,
// view.w): the entry points, which wrap the World in a recording view at
// once; the World's index, a memo whose lookups record at their view
// methods (reads.go); ClassKey and the planner's questions, which are
// asked again for every change; and the reads that shape no resource
// (warnings, provenance), which say so where they are made.
var worldAllowed = map[string]bool{
	// Entry points.
	"Generator.Class": true, "Generator.generate": true, "reuseOf": true, "Generator.Proxy": true, "Generator.UpdateEndpoints": true,
	"Generator.Sweep": true, "partCache.sweepLocked": true, "RuleJWKS": true,
	// The index and the class key.
	"ClassKey": true, "indexFor": true, "storeIndex": true, "evictIndexes": true, "newWorldIndex": true,
	// Questions the planner asks about a configuration.
	"ProxyConfig.Touched": true, "ProxyConfig.Touches": true, "ProxyConfig.OwnTouches": true,
	"ClassConfig.Touches": true, "IdentitiesChanged": true,
	// Scopes that read another World, or nothing.
	"Scope.in": true,
	// Whether a previous scope's visible services stand is a planner's
	// question; what choosing them read is recorded as the new scope's.
	"Scope.visibleIn": true,
	// Keeps the World it chose in as ClassConfig.at does: changesSince
	// alone looks into it.
	"chooseServices": true,
	// The changes since the World a sibling class was generated in
	// decide which of its units stand (class_sibling.go); changesSince
	// alone looks into it.
	"siblings.take": true,
	// Reads that shape no resource.
	"Generator.requestAuthnConfigs": true, "Generator.peerAuthentication": true, "Generator.authzPolicies": true,
	"resolvedExtAuthz": true, "Generator.warnEntry": true, "Generator.warnGRPCPermissive": true,
	// A shared part's key is read unrecorded by the class asking; the
	// part records those reads once, as its own.
	"partCache.get": true,
	// A refusal's log line names the class.
	"Generator.addTo": true,
	// A variant's telemetry reads what its base's read (the class key's
	// |tel= part is its base's), recorded by the base's generation.
	"Generator.Variant": true,
}

// TestGenerationReadsOnlyThroughViews: generation code cannot read the
// World without recording the read. Outside reads.go and reads_view.go no function of the
// package may mention *model.World, build a view or step past one
// (view.w, unrecorded) unless worldAllowed names it, with the reason it
// records nothing. A new read of the World must then go through a view
// method, or be added here and argued for.
func TestGenerationReadsOnlyThroughViews(t *testing.T) {
	used := map[string]bool{}
	eachDecl(t, func(file string, fset *token.FileSet, d ast.Decl) {
		switch d := d.(type) {
		case *ast.FuncDecl:
			fn := funcName(d)
			if why := reachesWorld(d); why != "" {
				if !worldAllowed[fn] {
					t.Errorf("%s: %s %s: generation must read the World through a recording view (reads.go)", fset.Position(d.Pos()), fn, why)
				}
				used[fn] = true
			}
		case *ast.GenDecl:
			if why := reachesWorld(d); why != "" && file != "class_key.go" {
				t.Errorf("%s: a declaration %s", fset.Position(d.Pos()), why)
			}
		}
	})
	for fn := range worldAllowed {
		if !used[fn] {
			t.Errorf("worldAllowed names %s, which no longer reaches the World: drop it", fn)
		}
	}
}

// eachDecl calls f on every declaration of the package's generation code:
// its files but the tests and the recording machinery (reads*.go).
func eachDecl(t *testing.T, f func(file string, fset *token.FileSet, d ast.Decl)) {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "reads") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			f(name, fset, d)
		}
	}
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	typ := d.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + d.Name.Name
	}
	return d.Name.Name
}

// reachesWorld says how n reaches past the views, or "".
func reachesWorld(n ast.Node) string {
	why := ""
	ast.Inspect(n, func(n ast.Node) bool {
		if why != "" {
			return false
		}
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && id.Name == "model" && n.Sel.Name == "World" {
				why = "mentions *model.World"
			}
			if n.Sel.Name == "unrecorded" {
				why = "reads unrecorded"
			}
			// A view's World is its field w; scopes' views are fields
			// named w too, so x.w.w is a view's World.
			if inner, ok := n.X.(*ast.SelectorExpr); ok && n.Sel.Name == "w" && inner.Sel.Name == "w" {
				why = "reads a view's World"
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "newView" {
				why = "builds a view"
			}
		}
		return true
	})
	return why
}

// The planner's contract, on a small World: a change of what a proxy's
// configuration read touches it, a change of something it did not read
// does not.
func TestReadsTouchWhatWasRead(t *testing.T) {
	w := loadWorld(t, efBase).World()
	p := labelled(t, "sidecar", "default", map[string]string{"app": "productpage"})
	pc := generate(t, w, p)
	for _, tc := range []struct {
		k    model.Key
		want bool
	}{
		{model.MeshKey, true},
		{model.Key{Kind: model.KindService, Namespace: "default", Name: "reviews"}, true},
		{model.Key{Kind: model.KindSidecar, Namespace: "default", Name: "any"}, true},
		{model.Key{Kind: model.KindSidecar, Namespace: "elsewhere", Name: "any"}, false},
		{model.Key{Kind: model.KindService, Namespace: "elsewhere", Name: "none"}, false},
		{model.Key{Kind: model.KindProxyConfig, Namespace: "default", Name: "any"}, false},
		{model.Key{Kind: model.KindHTTPRoute, Namespace: "default", Name: "any"}, false},
	} {
		if got := pc.Touches(tc.k, w); got != tc.want {
			t.Errorf("a change of %s touches the proxy: %v, want %v", tc.k, got, tc.want)
		}
	}
}

// A proxy's own configuration (its virtualInbound listener) carries its
// class's inbound telemetry: a Telemetry change must touch it, not only
// the class, or a push that keeps the own part (push.Plan.KeepOwn) would
// keep the old inbound access logs and metrics.
func TestTelemetryTouchesTheProxysOwnConfiguration(t *testing.T) {
	w := loadWorld(t, efBase).World()
	p := labelled(t, "sidecar", "default", map[string]string{"app": "productpage"})
	pc := generate(t, w, p)
	if len(pc.Own[ListenerType].Names) == 0 {
		t.Fatal("the proxy has no inbound listener to test with")
	}
	k := model.Key{Kind: model.KindTelemetry, Namespace: "default", Name: "logs"}
	if !pc.OwnTouches(k, w) {
		t.Errorf("a change of %s does not touch the proxy's own configuration", k)
	}
}

// scopeFields are the selections a Scope holds. Reading one outside
// scopeAllowed would take a selection without recording its answer, and
// a reused unit or port listener would not see it change.
var scopeFields = map[string]bool{
	"Services": true, "aliases": true, "visible": true, "namespaces": true, "vs": true, "vsRank": true,
	"vsWild": true, "delegations": true, "dr": true, "drShadowed": true, "sidecar": true, "tel": true, "byPort": true,
}

// scopeAllowed are the functions that may read a Scope's selections
// directly, with the reason it is recorded or need not be.
var scopeAllowed = map[string]string{
	"newScope": "builds the scope", "Scope.indexVirtualServices": "builds the scope",
	"Scope.addWildcardRoutes": "builds the scope", "ruleIndex.forScope": "builds the scope",
	"visibleHosts": "builds the scope", "Generator.generate": "sets the telemetry; the class's own resources are rebuilt by every generation",
	"Generator.addUnits":    "a unit per selected service: newScope recorded the selection, each unit records its own reads",
	"Scope.VirtualServices": "records qVirtualServices", "Scope.destinationRuleConfig": "records qDestinationRule",
	"Scope.aliasNames": "records qAliases", "Scope.l4VirtualServicesOf": "unrecorded form; l4VirtualServices records",
	"Scope.gatewayVirtualServicesOf": "unrecorded form; gatewayVirtualServices records",
	"Generator.vsHTTPRoutes":         "records qDelegation", "Scope.registryOnlyIn": "RegistryOnly records qRegistryOnly",
	"Scope.portServices": "sidecarOutbound records qPortServices", "servicesByPort": "sidecarOutbound records qPortServices",
	"Scope.outTel": "adds the telemetry's reads", "Scope.inTel": "adds the telemetry's reads", "Scope.readTelemetry": "adds the telemetry's reads",
	"Scope.Visible": "the planner's question, not generation", "Scope.SeesNamespace": "the planner's question, not generation",
	"autoPassthroughChains": "a gateway's listeners are its class's own, rebuilt by every generation",
	"Generator.warnRules":   "a warning", "Generator.warnSidecar": "a warning",
	"Generator.Variant": "sets the variant's telemetry, which reads what its base's recorded",
	"sibling.port":      "adds the class's telemetry reads to the listeners it takes, as Scope.readTelemetry does",
}

// TestScopeSelectionsAreRecorded: outside the recording machinery
// (reads*.go), a Scope's selections are read only by the functions
// scopeAllowed names. Scopes are named sc, csc or quiet by this package's
// convention; the test reads that convention.
func TestScopeSelectionsAreRecorded(t *testing.T) {
	used := map[string]bool{}
	eachDecl(t, func(_ string, fset *token.FileSet, d ast.Decl) {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			return
		}
		fn := funcName(fd)
		ast.Inspect(fd, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || !scopeFields[sel.Sel.Name] {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && (id.Name == "sc" || id.Name == "csc" || id.Name == "quiet") {
				if _, ok := scopeAllowed[fn]; !ok {
					t.Errorf("%s: %s reads the scope's %s unrecorded: go through a recording accessor (reads_scope.go)", fset.Position(sel.Pos()), fn, sel.Sel.Name)
				}
				used[fn] = true
			}
			return true
		})
	})
	for fn := range scopeAllowed {
		if !used[fn] {
			t.Errorf("scopeAllowed names %s, which reads no selection: drop it", fn)
		}
	}
}

// A sealed Reads knows the kinds it and its parts read (Reads.mask), so
// that a walk for a change of another kind skips it; a part sealed with
// its parent, or without a mask, is never skipped wrongly.
func TestReadsMasksSkipOnlyWhatCannotBeTouched(t *testing.T) {
	svc := model.Key{Kind: model.KindService, Namespace: "ns", Name: "a"}
	vs := model.Key{Kind: model.KindVirtualService, Namespace: "ns", Name: "a"}
	leaf := newReads()
	leaf.key(svc)
	root := newReads()
	root.add(leaf)
	root.seal()
	if !leaf.sealed || leaf.mask == 0 {
		t.Fatal("sealing a Reads did not seal its part")
	}
	for _, tc := range []struct {
		k    model.Key
		want bool
	}{{svc, true}, {vs, false}} {
		cs := changesOf(nil, nil, []model.Key{tc.k})
		if got := root.touchedBy(cs); got != tc.want {
			t.Errorf("a change of %s touches the reads: %v, want %v", tc.k, got, tc.want)
		}
		if skipped := root.skips(cs.mask); skipped == tc.want {
			t.Errorf("a change of %s: skipped %v", tc.k, skipped)
		}
	}
	scoped := newReads()
	scoped.scope(scopeRead{q: qRegistryOnly})
	scoped.seal()
	if scoped.skips(changesOf(nil, nil, []model.Key{vs}).mask | scopedBit) {
		t.Error("a Reads with scope reads is skipped when scope answers are asked")
	}
	unsealed := &Reads{keys: []model.Key{vs}}
	if unsealed.skips(kindBit(model.KindService)) {
		t.Error("a Reads without a mask is skipped")
	}
}
