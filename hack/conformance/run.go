// Package conformance compares what Envoy (or a proxyless gRPC client)
// would do with discovery's configuration and with istiod's, for the same
// inputs, proxies and requests, and reports where they differ.
//
// In: corpus entries. Out: Cases, one per (input, proxy, request), each
// passing, differing, or not supported (the request depends on a field
// or kind discovery reports it does not support), and the report
// test/conformance/CONFORMANCE.md with its ratchet.
package conformance

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/meshplane/discovery/hack/conformance/corpus"
	"github.com/meshplane/discovery/hack/conformance/dataplane"
	"github.com/meshplane/discovery/hack/conformance/discovery"
	"github.com/meshplane/discovery/hack/conformance/istiod"
	"github.com/meshplane/discovery/hack/conformance/matrix"
	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// Verdict is a case's outcome.
type Verdict string

// Verdicts.
const (
	Pass         Verdict = "pass"
	Differs      Verdict = "differs"
	NotSupported Verdict = "not-supported"
	// Explained differs in classes explained.txt gives a reason for.
	Explained Verdict = "explained"
)

// Case is one (input, proxy, request) and how the two control planes'
// configurations decide it.
type Case struct {
	Input    string
	Source   string
	Node     string
	NodeKind scenario.NodeKind
	Request  dataplane.Request
	Origin   string
	Kinds    []string
	Features []string
	Verdict  Verdict
	// Istiod and Ours summarise each decision; Diff lists the facts that
	// differ ("- " istiod only, "+ " ours only), by aspect.
	Istiod, Ours string
	Diff         map[string][]string
	// Unsupported lists what discovery reports it does not support of
	// the objects the request depends on.
	Unsupported []string
	// Explained are the differing aspects whose class has an explanation
	// (Explain).
	Explained map[string]bool
	// IstiodTrace and OursTrace name the resources each decision went
	// through (for -case; not compared).
	IstiodTrace, OursTrace []string
}

// ID identifies a case across runs.
func (c Case) ID() string { return c.Input + " | " + c.Node + " | " + c.Request.String() }

// InputResult is what became of one input.
type InputResult struct {
	Name, Source string
	// Rejected lists the objects Istio's validation refuses (given to
	// neither side) with the reason.
	Rejected map[string]string
	// Dropped counts objects of other APIs neither side reads.
	Dropped map[string]int
	// Error is why the input produced no cases (the oracle failed).
	Error string
	Nodes int
}

// Run compares every entry, as many at once as there are processors.
func Run(entries []corpus.Entry) ([]Case, []InputResult) {
	type result struct {
		cases []Case
		input InputResult
	}
	results := make([]result, len(entries))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i].cases, results[i].input = runOne(entries[i])
			}
		}()
	}
	for i := range entries {
		next <- i
	}
	close(next)
	wg.Wait()
	var cases []Case
	var inputs []InputResult
	for _, r := range results {
		cases = append(cases, r.cases...)
		inputs = append(inputs, r.input)
	}
	sort.SliceStable(cases, func(i, j int) bool { return cases[i].ID() < cases[j].ID() })
	return cases, inputs
}

func runOne(e corpus.Entry) ([]Case, InputResult) {
	admitted, rejected := istiod.Admit(e.Objects)
	in := scenario.Complete(e.Name, e.Source, admitted, e.Nodes)
	ir := InputResult{Name: e.Name, Source: e.Source, Rejected: rejected, Dropped: in.Dropped, Nodes: len(in.Nodes)}
	theirs, err := istiod.Generate(in, matrix.GRPCTargets(in))
	if err != nil {
		ir.Error = "istiod: " + err.Error()
		return nil, ir
	}
	ours, oursErr := discovery.Generate(in)
	inputWide := inputUnsupported(in, ours)
	var cases []Case
	for _, n := range in.SortedNodes() {
		for _, p := range matrix.For(in, n) {
			c := Case{Input: e.Name, Source: e.Source, Node: n.Name(), NodeKind: n.Kind, Request: p.Request,
				Origin: p.Origin, Kinds: p.Kinds(), Features: p.Features()}
			da := dataplane.Evaluate(theirs[n.ID], p.Request)
			c.Istiod, c.IstiodTrace = da.Summary(), da.Trace
			if oursErr != nil {
				c.Verdict, c.Ours = Differs, "generation failed"
				c.Diff = map[string][]string{dataplane.Routing: {"+ error: " + oursErr.Error()}}
				cases = append(cases, c)
				continue
			}
			db := dataplane.Evaluate(ours.Configs[n.ID], p.Request)
			c.Ours, c.OursTrace = db.Summary(), db.Trace
			c.Diff = dataplane.DiffByAspect(da, db)
			c.Unsupported = append(append([]string(nil), inputWide...), relevantUnsupported(p, ours)...)
			switch {
			case len(c.Diff) == 0:
				c.Verdict = Pass
			case len(c.Unsupported) > 0:
				c.Verdict = NotSupported
			default:
				c.Verdict = Differs
			}
			cases = append(cases, c)
		}
	}
	return cases, ir
}

// inputUnsupported lists the input's objects of kinds discovery does not
// read at all: they may change any proxy's configuration (an EnvoyFilter
// patches anything), so they concern every case of the input.
func inputUnsupported(in *scenario.Input, ours *discovery.Result) []string {
	if ours == nil {
		return nil
	}
	var out []string
	for key, reasons := range ours.Unsupported {
		for _, r := range reasons {
			// A MeshConfig field it does not apply concerns every proxy.
			if r == "kind not read by discovery" || key == "MeshConfig" {
				out = append(out, key+": "+r)
			}
		}
	}
	sort.Strings(out)
	return out
}

// relevantUnsupported lists what discovery reports unsupported of the
// objects a probe depends on.
func relevantUnsupported(p matrix.Probe, ours *discovery.Result) []string {
	var out []string
	for _, o := range p.Objects {
		for _, r := range ours.Unsupported[o.Key()] {
			if r != "kind not read by discovery" {
				out = append(out, o.Key()+": "+r)
			}
		}
	}
	sort.Strings(out)
	return out
}

// AspectVerdict is the case's verdict for one aspect of the decision.
func (c Case) AspectVerdict(aspect string) Verdict {
	switch {
	case len(c.Diff[aspect]) == 0:
		return Pass
	case len(c.Unsupported) > 0:
		return NotSupported
	case c.Explained[aspect]:
		return Explained
	}
	return Differs
}

// Counts tallies verdicts.
type Counts struct{ Pass, Explained, Differs, NotSupported int }

// Add counts one verdict.
func (c *Counts) Add(v Verdict) {
	switch v {
	case Pass:
		c.Pass++
	case Explained:
		c.Explained++
	case Differs:
		c.Differs++
	case NotSupported:
		c.NotSupported++
	}
}

// Total is the number of cases counted.
func (c Counts) Total() int { return c.Pass + c.Explained + c.Differs + c.NotSupported }

// Rate is the pass rate in percent.
func (c Counts) Rate() string {
	if c.Total() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(c.Pass)/float64(c.Total()))
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
