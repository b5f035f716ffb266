package matrix

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
)

// sampleRegex returns a short string a regular expression matches in
// full, or ok=false when it cannot find one.
func sampleRegex(re string) (string, bool) {
	r, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return "", false
	}
	var b strings.Builder
	if !gen(&b, r.Simplify(), 0) {
		return "", false
	}
	return b.String(), true
}

func gen(b *strings.Builder, r *syntax.Regexp, depth int) bool {
	if depth > 50 {
		return false
	}
	switch r.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true
	case syntax.OpLiteral:
		b.WriteString(string(r.Rune))
		return true
	case syntax.OpCharClass:
		b.WriteRune(pickRune(r.Rune))
		return true
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteByte('x')
		return true
	case syntax.OpCapture:
		return gen(b, r.Sub[0], depth+1)
	case syntax.OpStar, syntax.OpQuest:
		return true
	case syntax.OpPlus:
		return gen(b, r.Sub[0], depth+1)
	case syntax.OpRepeat:
		for i := 0; i < r.Min; i++ {
			if !gen(b, r.Sub[0], depth+1) {
				return false
			}
		}
		return true
	case syntax.OpConcat:
		for _, s := range r.Sub {
			if !gen(b, s, depth+1) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		return gen(b, r.Sub[0], depth+1)
	}
	return false
}

// pickRune chooses a readable rune from a class's ranges: a letter or
// digit when the class has one.
func pickRune(ranges []rune) rune {
	for i := 0; i+1 < len(ranges); i += 2 {
		for c := ranges[i]; c <= ranges[i+1] && c < ranges[i]+128; c++ {
			if unicode.IsLetter(c) || unicode.IsDigit(c) {
				return c
			}
		}
	}
	for i := 0; i+1 < len(ranges); i += 2 {
		if ranges[i] > ' ' && ranges[i] < 0x7f {
			return ranges[i]
		}
		if ranges[i] <= '/' && ranges[i+1] >= '/' {
			return '/'
		}
	}
	if len(ranges) > 0 {
		return ranges[0]
	}
	return 'x'
}

// sampleString returns a value an Istio StringMatch ({exact}, {prefix},
// {regex}) matches; an empty StringMatch matches any value.
func sampleString(m map[string]any, prefixTail string) (string, bool) {
	if v, ok := m["exact"].(string); ok {
		return v, true
	}
	if v, ok := m["prefix"].(string); ok {
		return v + prefixTail, true
	}
	if v, ok := m["regex"].(string); ok {
		return sampleRegex(v)
	}
	return "present", len(m) == 0
}

// stringMatches reports whether an Istio StringMatch matches v.
func stringMatches(m map[string]any, v string) bool {
	switch {
	case m["exact"] != nil:
		return m["exact"] == v
	case m["prefix"] != nil:
		p, _ := m["prefix"].(string)
		return strings.HasPrefix(v, p)
	case m["regex"] != nil:
		re, _ := m["regex"].(string)
		r, err := regexp.Compile("^(?:" + re + ")$")
		return err == nil && r.MatchString(v)
	}
	return true
}

// samplePattern returns a value an Istio authorization pattern ("exact",
// "prefix*", "*suffix", "*", URI templates {*} and {**}) matches.
func samplePattern(p string) string {
	switch {
	case p == "*":
		return "any"
	case strings.Contains(p, "{"):
		p = strings.ReplaceAll(p, "{**}", "x/y")
		return strings.ReplaceAll(p, "{*}", "x")
	case strings.HasSuffix(p, "*"):
		return strings.TrimSuffix(p, "*") + "x"
	case strings.HasPrefix(p, "*"):
		return "x" + strings.TrimPrefix(p, "*")
	}
	return p
}

// samplePath is samplePattern for paths: the value starts with "/".
func samplePath(p string) string {
	s := samplePattern(p)
	switch {
	case p == "*":
		return "/"
	case strings.HasPrefix(p, "*"):
		return "/x" + strings.TrimPrefix(p, "*")
	}
	return s
}
