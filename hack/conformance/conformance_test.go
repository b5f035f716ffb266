package conformance

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshplane/discovery/hack/conformance/corpus"
	"github.com/meshplane/discovery/hack/conformance/scenario"
)

var (
	update = flag.Bool("update", false, "rewrite test/conformance/CONFORMANCE.md and cases.txt (refused when a case that passed now differs, unless -accept-regressions)")
	accept = flag.Bool("accept-regressions", false, "with -update, write even when cases that passed now differ")
	trace  = flag.String("case", "", "log the decisions of the cases whose ID contains this text")
	repo   = flag.String("repo", "../..", "the discovery checkout whose golden inputs the corpus reads")
)

const (
	reportDir = "../../test/conformance"
	command   = "cd hack/conformance && go test -run TestConformance -update ."
	minCases  = 300
	// explainedPath holds the reasons of the differences kept on purpose.
	explainedPath = "explained.txt"
)

// kindsRead are the Istio kinds discovery reads, each of which the
// corpus must exercise.
var kindsRead = []string{"VirtualService", "DestinationRule", "Gateway", "ServiceEntry", "Sidecar", "PeerAuthentication", "AuthorizationPolicy"}

func istioModule(t *testing.T) (dir, version string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "istio.io/istio").Output()
	if err != nil {
		t.Fatalf("go list -m istio.io/istio: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] == "" {
		t.Fatalf("istio.io/istio is not in the module cache (%q): run go mod download", out)
	}
	return f[0], f[1]
}

func TestConformance(t *testing.T) {
	dir, version := istioModule(t)
	entries, err := corpus.Load(dir, *repo, "testdata/cases")
	if err != nil {
		t.Fatal(err)
	}
	cases, inputs := Run(entries)
	checkCoverage(t, cases)
	if *trace != "" {
		for _, c := range cases {
			if strings.Contains(c.ID(), *trace) {
				t.Logf("%s\n  origin: %s\n  istiod: %s\n    %s\n  discovery: %s\n    %s\n  diff: %v\n  unsupported: %v", c.ID(), c.Origin,
					c.Istiod, strings.Join(c.IstiodTrace, "\n    "), c.Ours, strings.Join(c.OursTrace, "\n    "), c.Diff, c.Unsupported)
			}
		}
	}
	classes := Classes(cases)
	text, err := os.ReadFile(explainedPath)
	if err != nil {
		t.Fatal(err)
	}
	explained, err := ParseExplanations(string(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range Explain(cases, classes, explained) {
		t.Errorf("%s: class %s is explained but no case differs in it any more (the difference changed or went away): remove or update its line", explainedPath, id)
	}
	// Every difference is fixed or explained: a new one fails the suite
	// (and is listed as unexplained in CONFORMANCE.md, which -update still
	// writes so that it can be read).
	for _, cl := range Unexplained(classes) {
		ex := cl.Cases[0]
		t.Errorf("unexplained difference %s (%s, %d cases): %s; e.g. %s: istiod %s, discovery %s: fix it, or give its reason in %s",
			cl.ID, cl.Aspect, len(cl.Cases), strings.Join(cl.Facts, " "), ex.ID(), oneLine(ex.Istiod), oneLine(ex.Ours), explainedPath)
	}
	report := Report(cases, classes, inputs, ReportOptions{IstioVersion: version, Command: command})
	ratchet := Ratchet(cases, classes)
	reportPath, ratchetPath := filepath.Join(reportDir, "CONFORMANCE.md"), filepath.Join(reportDir, "cases.txt")
	if *update {
		if old, err := os.ReadFile(ratchetPath); err == nil && !*accept {
			before, err := ParseRatchet(string(old))
			if err != nil {
				t.Fatal(err)
			}
			if regs := Regressions(before, cases); len(regs) > 0 {
				for _, r := range regs {
					t.Errorf("regression: %s", r)
				}
				t.Fatalf("not written: %d regressions (fix them, or rerun with -accept-regressions and say why in the commit)", len(regs))
			}
		}
		if err := os.MkdirAll(reportDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for path, text := range map[string]string{reportPath: report, ratchetPath: ratchet} {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	old, err := os.ReadFile(ratchetPath)
	if err != nil {
		t.Fatalf("%v (run %s)", err, command)
	}
	before, err := ParseRatchet(string(old))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Regressions(before, cases) {
		t.Errorf("regression: %s", r)
	}
	if string(old) != ratchet {
		t.Errorf("%s is stale: the verdicts changed (run %s and review the diff; this run's is %s)", ratchetPath, command, keep(t, "cases.txt", ratchet))
	}
	if committed, err := os.ReadFile(reportPath); err != nil || string(committed) != report {
		t.Errorf("%s is stale (run %s and review the diff; this run's is %s)", reportPath, command, keep(t, "CONFORMANCE.md", report))
	}
}

// keep writes what this run generated where it can be compared with the
// committed file, and says where.
func keep(t *testing.T, name, text string) string {
	dir := filepath.Join(os.TempDir(), "conformance")
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err.Error()
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return err.Error()
	}
	return path
}

// checkCoverage holds the corpus to its promise: enough cases, every
// Istio kind discovery reads, every kind of proxy.
func checkCoverage(t *testing.T, cases []Case) {
	t.Helper()
	if len(cases) < minCases {
		t.Errorf("%d cases, want at least %d", len(cases), minCases)
	}
	kinds, nodes := map[string]int{}, map[scenario.NodeKind]int{}
	for _, c := range cases {
		for _, k := range c.Kinds {
			kinds[k]++
		}
		nodes[c.NodeKind]++
	}
	for _, k := range kindsRead {
		if kinds[k] == 0 {
			t.Errorf("no case exercises %s", k)
		}
	}
	for _, n := range []scenario.NodeKind{scenario.Sidecar, scenario.Gateway, scenario.GRPC} {
		if nodes[n] == 0 {
			t.Errorf("no case from a %s proxy", n)
		}
	}
}
