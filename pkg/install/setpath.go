package install

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A Path addresses a place in the values tree, as --set writes it:
// dot-separated steps, where a step is a field name (a literal dot written
// "\."), a list index "[0]", a list element chosen by a field
// "[name:ingressgateway]", or, in a list of scalars, the element equal to
// a value "[:value]". A bracket may follow a field name directly, as
// istioctl writes it (a[0].b), or as a step of its own (a.[0].b).
type Path []Step

// Step is one step of a Path.
type Step struct {
	// Key is a field name (when IsKey).
	Key string
	// Index selects a list element by position; -1 when not an index.
	Index int
	// MatchKey and MatchValue select the list element whose field MatchKey
	// equals MatchValue; with MatchSelf, the element equal to MatchValue.
	MatchKey, MatchValue string
	MatchSelf            bool
}

// IsKey reports whether s names a field.
func (s Step) IsKey() bool { return s.Index < 0 && s.MatchKey == "" && !s.MatchSelf }

func (s Step) String() string {
	switch {
	case s.Index >= 0:
		return "[" + strconv.Itoa(s.Index) + "]"
	case s.MatchSelf:
		return "[:" + s.MatchValue + "]"
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
// components.ingressGateways[name:istio-ingressgateway].k8s.replicaCount.
func ParsePath(s string) (Path, error) {
	if s == "" {
		return nil, errors.New("empty path")
	}
	var out Path
	for _, raw := range splitUnescaped(s) {
		steps, err := parseSegment(raw)
		if err != nil {
			return nil, fmt.Errorf("path %q: %w", s, err)
		}
		if len(out)+len(steps) > maxPathSteps {
			return nil, fmt.Errorf("path %q: more than %d steps", s, maxPathSteps)
		}
		out = append(out, steps...)
	}
	if !out[0].IsKey() {
		return nil, fmt.Errorf("path %q: must start with a field name", s)
	}
	return out, nil
}

// splitUnescaped splits on '.' outside brackets and not preceded by a
// backslash, and turns "\." into ".". Other backslashes stay as they are.
func splitUnescaped(s string) []string {
	var parts []string
	var cur strings.Builder
	depth := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '.':
			cur.WriteByte('.')
			i++
		case s[i] == '[':
			depth++
			cur.WriteByte('[')
		case s[i] == ']':
			if depth > 0 {
				depth--
			}
			cur.WriteByte(']')
		case s[i] == '.' && depth == 0:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(parts, cur.String())
}

// parseSegment parses what lies between two dots: a field name, a
// bracket, or a field name followed by brackets (a[0], a[0][1]).
func parseSegment(raw string) ([]Step, error) {
	if raw == "" {
		return nil, errors.New("empty step (two dots, or a dot at an end)")
	}
	var out []Step
	name, rest, hasBracket := strings.Cut(raw, "[")
	if name != "" {
		if strings.Contains(name, "]") {
			return nil, fmt.Errorf("step %q: unbalanced brackets", raw)
		}
		out = append(out, keyStep(name))
	}
	if !hasBracket {
		return out, nil
	}
	rest = "[" + rest
	for rest != "" {
		end := strings.IndexByte(rest, ']')
		if !strings.HasPrefix(rest, "[") || end < 0 {
			return nil, fmt.Errorf("step %q: want [INDEX], [KEY:VALUE] or [:VALUE] after a field name", raw)
		}
		st, err := parseBracket(rest[:end+1])
		if err != nil {
			return nil, fmt.Errorf("step %q: %w", raw, err)
		}
		out = append(out, st)
		rest = rest[end+1:]
	}
	return out, nil
}

func parseBracket(raw string) (Step, error) {
	inner := raw[1 : len(raw)-1]
	if inner == "" {
		return Step{}, errors.New("want [INDEX], [KEY:VALUE] or [:VALUE]")
	}
	if strings.ContainsAny(inner, "[") {
		return Step{}, errors.New("brackets do not nest")
	}
	if k, v, ok := strings.Cut(inner, ":"); ok {
		if v == "" {
			return Step{}, fmt.Errorf("%s: want [KEY:VALUE] or [:VALUE] with a non-empty value", raw)
		}
		if k == "" {
			return Step{Index: -1, MatchValue: v, MatchSelf: true}, nil
		}
		return Step{Index: -1, MatchKey: k, MatchValue: v}, nil
	}
	i, err := strconv.Atoi(inner)
	if err != nil || i < 0 || strings.HasPrefix(inner, "+") {
		return Step{}, fmt.Errorf("%s: list index must be a non-negative integer", raw)
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
// into the type the path expects when it is applied. As in istioctl, "\,"
// in the value is a comma.
func ParseSet(arg string) (SetValue, error) {
	p, v, ok := strings.Cut(arg, "=")
	if !ok {
		return SetValue{}, fmt.Errorf("--set %q: want path=value", arg)
	}
	path, err := ParsePath(strings.TrimSpace(p))
	if err != nil {
		return SetValue{}, fmt.Errorf("--set %q: %w", arg, err)
	}
	return SetValue{Path: path, Value: strings.ReplaceAll(v, `\,`, ","), Raw: arg}, nil
}
