package conformance

import (
	"strings"
	"testing"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
)

func sampleCases() []Case {
	req := dataplane.Request{Mode: dataplane.Outbound, DstIP: "10.0.0.1", DstPort: 80, Authority: "web"}
	return []Case{
		{Input: "case:a", Node: "sidecar:default/client-0", Request: req, Verdict: Pass, Diff: map[string][]string{}},
		{Input: "case:a", Node: "sidecar:default/client-0", Request: dataplane.Request{Mode: dataplane.Outbound, DstIP: "10.0.0.2", DstPort: 5432, Protocol: dataplane.TCP},
			Verdict: Differs, Diff: map[string][]string{dataplane.ClusterPolicy: {"- upstream[0] cluster lb: LEAST_REQUEST(choices=2)"}}},
	}
}

func TestRatchetHoldsWhatPassed(t *testing.T) {
	cases := sampleCases()
	text := Ratchet(cases, Classes(cases))
	before, err := ParseRatchet(text)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(before); got != 2 {
		t.Fatalf("%d cases read back, want 2:\n%s", got, text)
	}
	if r := Regressions(before, cases); len(r) != 0 {
		t.Errorf("unchanged verdicts are no regression: %v", r)
	}
	t.Run("an aspect that passed and now differs is a regression", func(t *testing.T) {
		now := sampleCases()
		now[0].Verdict = Differs
		now[0].Diff = map[string][]string{dataplane.Routing: {"- upstream[0] weight: 1000000", "+ upstream[0] weight: 500000"}}
		r := Regressions(before, now)
		if len(r) != 1 || !strings.Contains(r[0], "routing passed and now differs") {
			t.Errorf("regressions %v", r)
		}
	})
	t.Run("an aspect that differed and now passes is not", func(t *testing.T) {
		now := sampleCases()
		now[1].Verdict, now[1].Diff = Pass, map[string][]string{}
		if r := Regressions(before, now); len(r) != 0 {
			t.Errorf("regressions %v", r)
		}
	})
	t.Run("a case that left the corpus is reported", func(t *testing.T) {
		if r := Regressions(before, sampleCases()[1:]); len(r) != 1 || !strings.Contains(r[0], "no longer in the corpus") {
			t.Errorf("regressions %v", r)
		}
	})
}

func TestClassesGeneraliseAddresses(t *testing.T) {
	a := Case{Input: "a", Diff: map[string][]string{dataplane.Security: {"- upstream[0] endpoint tls: 10.1.0.1:80 tls sni=outbound_.80_._.a.ns.svc.cluster.local sans=[uri:exact:spiffe://cluster.local/ns/ns/sa/a]"}}}
	b := Case{Input: "b", Diff: map[string][]string{dataplane.Security: {"- upstream[1] endpoint tls: 10.2.0.9:8080 tls sni=outbound_.8080_.v1_.b.other.svc.cluster.local sans=[uri:exact:spiffe://cluster.local/ns/other/sa/b]"}}}
	c := Case{Input: "c", Diff: map[string][]string{dataplane.Security: {"- upstream[0] endpoint tls: 10.1.0.1:80 plaintext"}}}
	classes := Classes([]Case{a, b, c})
	if len(classes) != 2 {
		t.Errorf("%d classes, want the two TLS differences in one and plaintext in another", len(classes))
	}
}
