package install

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A Path addresses a place in the values tree, as --set writes it:
// dot-separated steps, where a step is a field name (a literal dot written
// "\."), a list index "[0]", or a list element chosen by a field
// "[name:ingressgateway]".
type Path []Step

// Step is one step of a Path.
type Step struct {
	// Key is a field name (when Index < 0 and MatchKey == "").
	Key string
	// Index selects a list element by position; -1 when not an index.
	Index int
	// MatchKey and MatchValue select the list element whose field MatchKey
	// equals MatchValue.
	MatchKey, MatchValue string
}

// IsKey reports whether s names a field.
func (s Step) IsKey() bool { return s.Index < 0 && s.MatchKey == "" }

func (s Step) String() string {
	switch {
	case s.Index >= 0:
		return "[" + strconv.Itoa(s.Index) + "]"
	case s.MatchKey != "":
		return "[" + s.MatchKey + ":" + s.MatchValue + "]"
	}
	return strings.ReplaceAll(s.Key, ".", `\.`)
}

func (p Path) String() string {
	parts := make([]string, len(p))
	for i, s := range p {
		parts[i] = s.String()
	}
	return strings.Join(parts, ".")
}

// child returns p extended by s, never sharing p's backing array.
func (p Path) child(s Step) Path {
	out := make(Path, len(p), len(p)+1)
	copy(out, p)
	return append(out, s)
}

func keyStep(k string) Step { return Step{Key: k, Index: -1} }

func indexStep(i int) Step { return Step{Index: i} }

// maxPathSteps bounds a --set path; nothing in the values tree is deeper.
const maxPathSteps = 64

// ParsePath parses a --set path such as
// components.ingressGateways.[name:istio-ingressgateway].k8s.replicaCount.
func ParsePath(s string) (Path, error) {
	if s == "" {
		return nil, errors.New("empty path")
	}
	var out Path
	for _, raw := range splitUnescaped(s) {
		if len(out) == maxPathSteps {
			return nil, fmt.Errorf("path %q: more than %d steps", s, maxPathSteps)
		}
		st, err := parseStep(raw)
		if err != nil {
			return nil, fmt.Errorf("path %q: %w", s, err)
		}
		out = append(out, st)
	}
	if !out[0].IsKey() {
		return nil, fmt.Errorf("path %q: must start with a field name", s)
	}
	return out, nil
}

// splitUnescaped splits on '.' not preceded by a backslash, and turns
// "\." into ".". Other backslashes stay as they are.
func splitUnescaped(s string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '.':
			cur.WriteByte('.')
			i++
		case s[i] == '.':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(parts, cur.String())
}

func parseStep(raw string) (Step, error) {
	if raw == "" {
		return Step{}, errors.New("empty step (two dots, or a dot at an end)")
	}
	if !strings.HasPrefix(raw, "[") {
		if strings.ContainsAny(raw, "[]") {
			return Step{}, fmt.Errorf("step %q: brackets must enclose a whole step, as in a.[0].b", raw)
		}
		return keyStep(raw), nil
	}
	if !strings.HasSuffix(raw, "]") || len(raw) < 3 {
		return Step{}, fmt.Errorf("step %q: want [INDEX] or [KEY:VALUE]", raw)
	}
	inner := raw[1 : len(raw)-1]
	if k, v, ok := strings.Cut(inner, ":"); ok {
		if k == "" || v == "" || strings.ContainsAny(k, "[]") {
			return Step{}, fmt.Errorf("step %q: want [KEY:VALUE] with both non-empty", raw)
		}
		return Step{Index: -1, MatchKey: k, MatchValue: v}, nil
	}
	i, err := strconv.Atoi(inner)
	if err != nil || i < 0 || strings.HasPrefix(inner, "+") {
		return Step{}, fmt.Errorf("step %q: list index must be a non-negative integer", raw)
	}
	return indexStep(i), nil
}

// SetValue is one parsed --set argument.
type SetValue struct {
	Path  Path
	Value string
	// Raw is the argument as given, for messages.
	Raw string
}

// ParseSet parses "path=value". The value is kept as text: it is turned
// into the type the path expects when it is applied.
func ParseSet(arg string) (SetValue, error) {
	p, v, ok := strings.Cut(arg, "=")
	if !ok {
		return SetValue{}, fmt.Errorf("--set %q: want path=value", arg)
	}
	path, err := ParsePath(p)
	if err != nil {
		return SetValue{}, fmt.Errorf("--set %q: %w", arg, err)
	}
	return SetValue{Path: path, Value: v, Raw: arg}, nil
}
