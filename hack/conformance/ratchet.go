package conformance

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
)

// ratchetHeader opens cases.txt.
const ratchetHeader = "# Every case of the conformance suite, grouped by input and proxy (lines \"> INPUT | PROXY\"), one\n" +
	"# request a line with its verdict per aspect (routing, security, route policy, cluster policy,\n" +
	"# connection): P pass, N not supported, or the difference class of CONFORMANCE.md. Generated with\n" +
	"# the report; a P here must stay a P.\n"

// Ratchet renders cases.txt: every case and its verdict per aspect.
func Ratchet(cases []Case, classes map[string]*Class) string {
	var b strings.Builder
	b.WriteString(ratchetHeader)
	group := ""
	for i := range cases {
		c := &cases[i]
		if g := c.Input + " | " + c.Node; g != group {
			group = g
			b.WriteString("> " + g + "\n")
		}
		cells := []string{c.Request.String()}
		for _, a := range dataplane.Aspects {
			switch c.AspectVerdict(a) {
			case Pass:
				cells = append(cells, "P")
			case NotSupported:
				cells = append(cells, "N")
			default:
				id := "D"
				if cl := classOf(classes, c, a); cl != nil {
					id = cl.ID
				}
				cells = append(cells, id)
			}
		}
		b.WriteString(strings.Join(cells, "\t") + "\n")
	}
	return b.String()
}

// ParseRatchet reads cases.txt into the passing aspects of each case ID.
func ParseRatchet(text string) (map[string][]string, error) {
	out := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line, group := 0, ""
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
			continue
		case strings.HasPrefix(l, "> "):
			group = strings.TrimPrefix(l, "> ")
			continue
		case group == "":
			return nil, fmt.Errorf("cases.txt line %d: a case before any \"> INPUT | PROXY\" line", line)
		}
		cells := strings.Split(l, "\t")
		if len(cells) != 1+len(dataplane.Aspects) {
			return nil, fmt.Errorf("cases.txt line %d: %d cells, want %d", line, len(cells), 1+len(dataplane.Aspects))
		}
		var pass []string
		for i, a := range dataplane.Aspects {
			if cells[1+i] == "P" {
				pass = append(pass, a)
			}
		}
		out[group+" | "+cells[0]] = pass
	}
	return out, sc.Err()
}

// Regressions lists the aspects of cases that passed before and do not
// now, and the cases that are gone.
func Regressions(before map[string][]string, cases []Case) []string {
	now := map[string]*Case{}
	for i := range cases {
		now[cases[i].ID()] = &cases[i]
	}
	var out []string
	for _, id := range sortedKeys(before) {
		c := now[id]
		if c == nil {
			out = append(out, "case no longer in the corpus: "+id)
			continue
		}
		for _, a := range before[id] {
			if c.AspectVerdict(a) != Pass {
				out = append(out, fmt.Sprintf("%s: %s passed and now differs: istiod %s, discovery %s: %s",
					id, a, c.Istiod, c.Ours, strings.Join(c.Diff[a], "; ")))
			}
		}
	}
	return out
}
