package conformance

import (
	"bufio"
	"fmt"
	"sort"
	"strings"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
)

// Explanations are the reasons of the difference classes that are known
// and kept on purpose (or cannot be closed), by class ID. They are read
// from explained.txt: one "ID: reason" a line, '#' comments. A class ID is
// a digest of its aspect and facts (classID), so an explanation holds only
// as long as the difference is exactly the one it explains.
type Explanations map[string]string

// ParseExplanations reads explained.txt.
func ParseExplanations(text string) (Explanations, error) {
	out := Explanations{}
	sc := bufio.NewScanner(strings.NewReader(text))
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		id, reason, ok := strings.Cut(l, ":")
		id, reason = strings.TrimSpace(id), strings.TrimSpace(reason)
		switch {
		case !ok || !classIDPattern.MatchString(id):
			return nil, fmt.Errorf("explained.txt line %d: want \"ID: reason\" with a class ID such as D1a2b3c, got %q", line, l)
		case reason == "":
			return nil, fmt.Errorf("explained.txt line %d: class %s has no reason", line, id)
		case out[id] != "":
			return nil, fmt.Errorf("explained.txt line %d: class %s explained twice", line, id)
		}
		out[id] = reason
	}
	return out, sc.Err()
}

// Explain marks the aspects of cases whose difference class is explained,
// and a differing case whose every differing aspect is explained as
// Explained. It returns the explanations that match no class: they are
// stale (the difference changed or went away) and must be removed.
func Explain(cases []Case, classes map[string]*Class, ex Explanations) (stale []string) {
	used := map[string]bool{}
	for _, cl := range classes {
		if r, ok := ex[cl.ID]; ok {
			cl.Reason = r
			used[cl.ID] = true
		}
	}
	for i := range cases {
		c := &cases[i]
		if c.Verdict != Differs {
			continue
		}
		all := true
		for _, a := range dataplane.Aspects {
			if len(c.Diff[a]) == 0 {
				continue
			}
			if cl := classOf(classes, c, a); cl != nil && cl.Reason != "" {
				if c.Explained == nil {
					c.Explained = map[string]bool{}
				}
				c.Explained[a] = true
			} else {
				all = false
			}
		}
		if all {
			c.Verdict = Explained
		}
	}
	for id := range ex {
		if !used[id] {
			stale = append(stale, id)
		}
	}
	sort.Strings(stale)
	return stale
}

// Unexplained lists the classes that have no explanation.
func Unexplained(classes map[string]*Class) []*Class {
	var out []*Class
	for _, cl := range sortedClasses(classes) {
		if cl.Reason == "" {
			out = append(out, cl)
		}
	}
	return out
}
