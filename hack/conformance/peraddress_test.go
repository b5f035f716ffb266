package conformance

import (
	"strings"
	"testing"

	"github.com/meshplane/discovery/hack/conformance/corpus"
	"github.com/meshplane/discovery/hack/conformance/dataplane"
	"github.com/meshplane/discovery/hack/conformance/discovery"
	"github.com/meshplane/discovery/hack/conformance/istiod"
	"github.com/meshplane/discovery/hack/conformance/matrix"
	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// TestListenersPerAddressDecideAlike: the outbound listeners split per
// service address (discovery serve --xds-listeners-per-address) decide
// every request of the corpus as the port listeners do, aspect by aspect,
// and the corpus reaches the address listeners (a hand-off to one is
// seen).
func TestListenersPerAddressDecideAlike(t *testing.T) {
	dir, _ := istioModule(t)
	entries, err := corpus.Load(dir, *repo, "testdata/cases")
	if err != nil {
		t.Fatal(err)
	}
	var compared, handedToAddress int
	for _, e := range entries {
		admitted, _ := istiod.Admit(e.Objects)
		in := scenario.Complete(e.Name, e.Source, admitted, e.Nodes)
		port, err := discovery.Generate(in)
		if err != nil {
			continue // the conformance run reports generation failures
		}
		split, err := discovery.GenerateWith(in, discovery.Options{ListenersPerAddress: true})
		if err != nil {
			t.Errorf("%s: per address: %v (per port: generated)", e.Name, err)
			continue
		}
		for _, n := range in.SortedNodes() {
			for _, p := range matrix.For(in, n) {
				a := dataplane.Evaluate(port.Configs[n.ID], p.Request)
				b := dataplane.Evaluate(split.Configs[n.ID], p.Request)
				compared++
				if handedOffToAddress(b.Trace) {
					handedToAddress++
				}
				if d := dataplane.DiffByAspect(a, b); len(d) > 0 {
					t.Errorf("%s | %s | %s: per address decides otherwise: %v\n  per port: %s\n  per address: %s",
						e.Name, n.Name(), p.Request, d, strings.Join(a.Trace, "; "), strings.Join(b.Trace, "; "))
				}
			}
		}
	}
	t.Logf("%d requests decided alike; %d of them handed over to a listener per address", compared, handedToAddress)
	if handedToAddress == 0 {
		t.Errorf("no request reached a listener per address: the comparison shows nothing")
	}
}

// handedOffToAddress reports whether a trace went through a listener on
// an exact address (not 0.0.0.0_PORT).
func handedOffToAddress(trace []string) bool {
	for _, s := range trace {
		name, ok := strings.CutPrefix(s, "listener ")
		if ok && strings.Contains(name, "_") && !strings.HasPrefix(name, "0.0.0.0_") {
			return true
		}
	}
	return false
}
