// Package istiovalidate is the differential validation test: Istio's own
// validation and discovery's (/validate and file mode) judge the same
// corpus of Istio YAML, taken from the pinned istio.io/istio module, and
// must agree but for the disagreements listed in reasons_test.go.
package istiovalidate

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

var (
	update  = flag.Bool("update", false, "rewrite test/compat/VALIDATION.md")
	details = flag.String("details", "", "write every disagreement, with both messages, to this file")
)

const tablePath = "../../test/compat/VALIDATION.md"

// outcome is one object's three judgements.
type outcome struct {
	Doc                  doc
	Istio, Webhook, File judgement
}

// mode is one of discovery's two ways of judging config.
type mode struct {
	Name  string
	Judge func(outcome) judgement
}

var modes = []mode{
	{"webhook", func(o outcome) judgement { return o.Webhook }},
	{"file", func(o outcome) judgement { return o.File }},
}

func TestDifferential(t *testing.T) {
	start := time.Now()
	root := istioModuleDir(t)
	docs, st := readCorpus(t, root)
	if len(docs) < 300 {
		t.Fatalf("corpus has %d objects: the walk of %s is broken", len(docs), root)
	}
	is := newIstio(t, root)
	outs := make([]outcome, len(docs))
	for i, d := range docs {
		outs[i] = outcome{Doc: d, Istio: is.judge(d), Webhook: discoveryWebhook(d), File: discoveryFile(d)}
	}
	t.Logf("%d objects judged three ways in %s", len(outs), time.Since(start).Round(time.Millisecond))

	var unexplained []string
	used := map[string]bool{}
	for _, o := range outs {
		for _, m := range modes {
			got := m.Judge(o)
			if got.Verdict == o.Istio.Verdict {
				continue
			}
			r, ok := reasons[o.Doc.Key]
			if !ok {
				unexplained = append(unexplained, fmt.Sprintf("%s (%s %q), %s: Istio %s, discovery %s\n\tIstio: %s\n\tdiscovery: %s",
					o.Doc.Key, o.Doc.GK.Kind, o.Doc.Name, m.Name, o.Istio.Verdict, got.Verdict, clip(o.Istio.Detail), clip(got.Detail)))
				continue
			}
			used[o.Doc.Key] = true
			if o.Istio.Verdict != refuse && got.Verdict == refuse && r.Class != envoyRefuses {
				t.Errorf("%s, %s: discovery refuses what Istio accepts, and only %q may excuse that", o.Doc.Key, m.Name, envoyRefuses)
			}
		}
	}
	for key := range reasons {
		if !used[key] {
			t.Errorf("reasons_test.go lists %s, which is no longer a disagreement: remove it", key)
		}
	}
	for _, u := range unexplained {
		t.Errorf("new disagreement (give it a reason in reasons_test.go, or fix it):\n%s", u)
	}
	if *details != "" {
		if err := os.WriteFile(*details, []byte(strings.Join(unexplained, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	table := render(outs, st)
	old, _ := os.ReadFile(tablePath)
	switch {
	case *update:
		if err := os.WriteFile(tablePath, table, 0o644); err != nil {
			t.Fatal(err)
		}
	case !bytes.Equal(old, table):
		t.Errorf("%s is stale: run `cd hack/istio-validate && go test -run TestDifferential -update` and commit it", tablePath)
	}
}

func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}

// render writes the table of agreements and disagreements per kind and
// the list of every disagreement with its reason.
func render(outs []outcome, st corpusStats) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	fmt.Fprintf(&b, "Corpus: %d objects of the kinds discovery validates, from %d YAML files of istio.io/istio %s "+
		"(%d files skipped for template syntax; %d documents that mention Istio but are not YAML objects; "+
		"%d objects of Istio kinds discovery does not read: %s).\n\n",
		len(outs), st.Files, istioVersion, st.Templates, st.Unreadable, sum(st.OtherIstio), counts(st.OtherIstio))
	for _, m := range modes {
		fmt.Fprintf(&b, "## %s\n\n", title(m.Name))
		b.WriteString("| kind | objects | agree: accept | agree: warn | agree: refuse | Istio accepts, discovery refuses | Istio refuses, discovery accepts | warn/accept differ |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
		rows := map[string]*[7]int{}
		var kinds []string
		for _, o := range outs {
			k := o.Doc.GK.Kind
			if rows[k] == nil {
				rows[k] = &[7]int{}
				kinds = append(kinds, k)
			}
			r := rows[k]
			r[0]++
			is, got := o.Istio.Verdict, m.Judge(o).Verdict
			switch {
			case is == got && is == accept:
				r[1]++
			case is == got && is == warn:
				r[2]++
			case is == got:
				r[3]++
			case got == refuse:
				r[4]++
			case is == refuse:
				r[5]++
			default:
				r[6]++
			}
		}
		sort.Strings(kinds)
		var total [7]int
		for _, k := range kinds {
			r := rows[k]
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d |\n", k, r[0], r[1], r[2], r[3], r[4], r[5], r[6])
			for i := range total {
				total[i] += r[i]
			}
		}
		fmt.Fprintf(&b, "| **all** | %d | %d | %d | %d | %d | %d | %d |\n\n", total[0], total[1], total[2], total[3], total[4], total[5], total[6])
	}
	b.WriteString("## Disagreements and their reasons\n\n")
	b.WriteString("| object | kind/name | Istio | webhook | file | reason |\n|---|---|---|---|---|---|\n")
	n := 0
	for _, o := range outs {
		if o.Webhook.Verdict == o.Istio.Verdict && o.File.Verdict == o.Istio.Verdict {
			continue
		}
		n++
		r := reasons[o.Doc.Key]
		why := r.Why
		if r.Class != "" {
			why = string(r.Class) + ": " + why
		}
		if why == "" {
			why = "(none listed: the test fails)"
		}
		fmt.Fprintf(&b, "| `%s` | %s/%s | %s | %s | %s | %s |\n", o.Doc.Key, o.Doc.GK.Kind, o.Doc.Name,
			o.Istio.Verdict, o.Webhook.Verdict, o.File.Verdict, strings.ReplaceAll(why, "|", "\\|"))
	}
	if n == 0 {
		b.WriteString("| (none) | | | | | |\n")
	}
	return b.Bytes()
}

func title(m string) string {
	if m == "webhook" {
		return "discovery's /validate (validate.Check) against Istio"
	}
	return "discovery's file mode (file.Parse) against Istio"
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

const istioVersion = "v0.0.0-20260827124520-eed52ebb66ad"

const header = `# Validation compared with Istio's

Generated by ` + "`cd hack/istio-validate && go test -run TestDifferential -update`" + `; do not edit.
` + "`make test`" + ` fails when this file is stale or when an object's verdict differs from
Istio's without a reason listed in hack/istio-validate/reasons_test.go.

Istio's verdict is a cluster's with istiod: the API server's metadata checks, the
structural schema and CEL rules of Istio's CRDs (manifests/charts/base/files/crd-all.gen.yaml,
run in process by istio.io/istio/pkg/config/crd), then istiod's validating webhook
(istio.io/istio/pkg/webhooks/validation/server, served in process). A verdict is
accept, warn (accepted with warnings) or refuse. Discovery's warnings about fields it
does not act on yet are not counted: only the warnings Istio also gives are.

The one reason discovery may refuse what Istio accepts is "discovery refuses what Envoy
would refuse" (gen.EnvoyRefusals: CR/LF in header names and values, empty header
prefixes, regexes over Envoy's program size...); such objects are listed below with it.

`
