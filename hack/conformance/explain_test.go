package conformance

import (
	"strings"
	"testing"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
)

func TestExplainMarksOnlyExplainedClasses(t *testing.T) {
	cases := sampleCases()
	cases = append(cases, Case{Input: "case:b", Node: "sidecar:default/client-0",
		Request: dataplane.Request{Mode: dataplane.Outbound, DstIP: "10.0.0.3", DstPort: 80, Authority: "api"},
		Verdict: Differs, Diff: map[string][]string{
			dataplane.ClusterPolicy: {"- upstream[0] cluster lb: LEAST_REQUEST(choices=2)"},
			dataplane.Routing:       {"- upstream[0] weight: 1000000", "+ upstream[0] weight: 500000"},
		}})
	classes := Classes(cases)
	lb := classOf(classes, &cases[1], dataplane.ClusterPolicy)
	if lb == nil || !classIDPattern.MatchString(lb.ID) {
		t.Fatalf("class of the lb difference: %+v", lb)
	}
	ex, err := ParseExplanations("# comment\n\n" + lb.ID + ": the lb is chosen on purpose\nD000000: gone\n")
	if err != nil {
		t.Fatal(err)
	}
	stale := Explain(cases, classes, ex)
	if len(stale) != 1 || stale[0] != "D000000" {
		t.Errorf("stale = %v, want [D000000]", stale)
	}
	if cases[1].Verdict != Explained || cases[1].AspectVerdict(dataplane.ClusterPolicy) != Explained {
		t.Errorf("a case whose only difference is explained: verdict %s", cases[1].Verdict)
	}
	if cases[2].Verdict != Differs || cases[2].AspectVerdict(dataplane.ClusterPolicy) != Explained || cases[2].AspectVerdict(dataplane.Routing) != Differs {
		t.Errorf("a case with an unexplained difference too must still differ: %s, %s, %s", cases[2].Verdict,
			cases[2].AspectVerdict(dataplane.ClusterPolicy), cases[2].AspectVerdict(dataplane.Routing))
	}
	if u := Unexplained(classes); len(u) != 1 || u[0].Aspect != dataplane.Routing {
		t.Errorf("unexplained = %v, want the routing class", u)
	}
	report := Report(cases, classes, nil, ReportOptions{})
	if !strings.Contains(report, "explained: the lb is chosen on purpose") || !strings.Contains(report, "**unexplained**") {
		t.Errorf("the report names neither the reason nor the unexplained class:\n%s", report)
	}
}

func TestClassIDIsStable(t *testing.T) {
	a := classID(dataplane.Routing, []string{"- outcome: local", "+ outcome: forward"})
	if a != classID(dataplane.Routing, []string{"- outcome: local", "+ outcome: forward"}) {
		t.Error("the same class gets two IDs")
	}
	if a == classID(dataplane.Security, []string{"- outcome: local", "+ outcome: forward"}) ||
		a == classID(dataplane.Routing, []string{"- outcome: local", "+ outcome: reset"}) {
		t.Error("another aspect or another fact must change the ID")
	}
}

func TestParseExplanationsRefusesBadLines(t *testing.T) {
	for _, text := range []string{"D12: short id\n", "Dabcdef\n", "Dabcdef:   \n", "Dabcdef: a\nDabcdef: b\n"} {
		if _, err := ParseExplanations(text); err == nil {
			t.Errorf("%q: no error", text)
		}
	}
}
