package gen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
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
	"Generator.Class": true, "Generator.Proxy": true, "Generator.UpdateEndpoints": true,
	"Generator.Sweep": true, "partCache.sweepLocked": true, "RuleJWKS": true,
	// The index and the class key.
	"ClassKey": true, "indexFor": true, "storeIndex": true, "evictIndexes": true, "newWorldIndex": true,
	// Questions the planner asks about a configuration.
	"ProxyConfig.Touched": true, "ProxyConfig.Touches": true, "ProxyConfig.OwnTouches": true,
	"ClassConfig.Touches": true, "IdentitiesChanged": true,
	// Scopes that read another World, or nothing.
	"Scope.in": true,
	// Reads that shape no resource.
	"Generator.requestAuthnConfigs": true, "Generator.peerAuthentication": true, "Generator.authzPolicies": true,
	"resolvedExtAuthz": true, "Generator.warnEntry": true, "Generator.warnGRPCPermissive": true,
	// Unit reuse: the keys are read unrecorded to decide whether the
	// unit's recorded reads still stand.
	"Generator.serviceUnit": true,
	// A shared part's key is read unrecorded by the class asking; the
	// part records those reads once, as its own.
	"partCache.get": true,
	// A refusal's log line names the class.
	"Generator.addTo": true,
}

// TestGenerationReadsOnlyThroughViews: generation code cannot read the
// World without recording the read. Outside reads.go and reads_view.go no function of the
// package may mention *model.World, build a view or step past one
// (view.w, unrecorded) unless worldAllowed names it, with the reason it
// records nothing. A new read of the World must then go through a view
// method, or be added here and argued for.
func TestGenerationReadsOnlyThroughViews(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || name == "reads.go" || name == "reads_view.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
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
				if why := reachesWorld(d); why != "" && !slices.Contains([]string{"class_key.go"}, name) {
					t.Errorf("%s: a declaration %s", fset.Position(d.Pos()), why)
				}
			}
		}
	}
	for fn := range worldAllowed {
		if !used[fn] {
			t.Errorf("worldAllowed names %s, which no longer reaches the World: drop it", fn)
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
