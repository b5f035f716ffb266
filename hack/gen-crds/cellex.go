package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

type celTokenKind int

const (
	celEOF celTokenKind = iota
	celIdentTok
	celNumber
	celString // text is the literal as the unparser writes it
	celPunct
)

type celToken struct {
	kind celTokenKind
	text string
}

var celPuncts = []string{"&&", "||", "==", "!=", "<=", ">=", "<", ">", "!", "?", ":", "(", ")", "[", "]", "{", "}", ",", ".", "+", "-", "*", "/", "%"}

// lexCEL splits a CEL expression into tokens, ending with a celEOF token.
func lexCEL(src string) ([]celToken, error) {
	var out []celToken
	for i := 0; ; {
		for i < len(src) && strings.ContainsRune(" \t\n\r\f\v", rune(src[i])) {
			i++
		}
		if i >= len(src) {
			return append(out, celToken{kind: celEOF}), nil
		}
		c := src[i]
		switch {
		case isCELIdentStart(c):
			j := i
			for j < len(src) && (isCELIdentStart(src[j]) || isDigit(src[j])) {
				j++
			}
			if j < len(src) && (src[j] == '"' || src[j] == '\'') && isStringPrefix(src[i:j]) {
				lit, n, err := lexString(src[j:], strings.ContainsAny(src[i:j], "rR"), strings.ContainsAny(src[i:j], "bB"))
				if err != nil {
					return nil, err
				}
				out = append(out, celToken{kind: celString, text: lit})
				i = j + n
				continue
			}
			out = append(out, celToken{kind: celIdentTok, text: src[i:j]})
			i = j
		case isDigit(c):
			j := lexNumber(src, i)
			out = append(out, celToken{kind: celNumber, text: src[i:j]})
			i = j
		case c == '"' || c == '\'':
			lit, n, err := lexString(src[i:], false, false)
			if err != nil {
				return nil, err
			}
			out = append(out, celToken{kind: celString, text: lit})
			i += n
		default:
			p := ""
			for _, cand := range celPuncts {
				if strings.HasPrefix(src[i:], cand) {
					p = cand
					break
				}
			}
			if p == "" {
				return nil, fmt.Errorf("unexpected character %q", c)
			}
			out = append(out, celToken{kind: celPunct, text: p})
			i += len(p)
		}
	}
}

func isCELIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isStringPrefix(s string) bool {
	switch strings.ToLower(s) {
	case "r", "b", "rb", "br":
		return true
	}
	return false
}

// lexNumber returns the end of the number starting at src[i]: decimal or
// hex integers with an optional u suffix, or a decimal float.
func lexNumber(src string, i int) int {
	j := i
	if strings.HasPrefix(src[i:], "0x") || strings.HasPrefix(src[i:], "0X") {
		j += 2
		for j < len(src) && strings.ContainsRune("0123456789abcdefABCDEF", rune(src[j])) {
			j++
		}
	} else {
		for j < len(src) && isDigit(src[j]) {
			j++
		}
		if j+1 < len(src) && src[j] == '.' && isDigit(src[j+1]) {
			j++
			for j < len(src) && isDigit(src[j]) {
				j++
			}
		}
		if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
			k := j + 1
			if k < len(src) && (src[k] == '+' || src[k] == '-') {
				k++
			}
			if k < len(src) && isDigit(src[k]) {
				for j = k; j < len(src) && isDigit(src[j]); j++ {
				}
			}
		}
	}
	if j < len(src) && (src[j] == 'u' || src[j] == 'U') {
		j++
	}
	return j
}

// lexString reads the quoted literal at the start of s ('...', "...",
// ”'...”' or """...""") and returns it as the unparser writes it:
// strings double-quoted (Go syntax), bytes as b"" with octal escapes.
func lexString(s string, raw, isBytes bool) (string, int, error) {
	quote := s[:1]
	if strings.HasPrefix(s, strings.Repeat(quote, 3)) {
		quote = s[:3]
	}
	var val strings.Builder
	i := len(quote)
	for {
		if i >= len(s) {
			return "", 0, fmt.Errorf("unterminated string")
		}
		if strings.HasPrefix(s[i:], quote) {
			i += len(quote)
			break
		}
		if len(quote) == 1 && s[i] == '\n' {
			return "", 0, fmt.Errorf("newline in string")
		}
		if s[i] != '\\' || raw {
			val.WriteByte(s[i])
			i++
			continue
		}
		n, err := unescapeCEL(s[i:], &val, isBytes)
		if err != nil {
			return "", 0, err
		}
		i += n
	}
	if isBytes {
		var b strings.Builder
		b.WriteString(`b"`)
		for _, c := range []byte(val.String()) {
			fmt.Fprintf(&b, "\\%03o", c)
		}
		b.WriteString(`"`)
		return b.String(), i, nil
	}
	if !utf8.ValidString(val.String()) {
		return "", 0, fmt.Errorf("string is not valid UTF-8")
	}
	return strconv.Quote(val.String()), i, nil
}

// unescapeCEL decodes the escape sequence at the start of s into val and
// returns its length.
func unescapeCEL(s string, val *strings.Builder, isBytes bool) (int, error) {
	if len(s) < 2 {
		return 0, fmt.Errorf("unterminated escape")
	}
	simple := map[byte]byte{'a': '\a', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v', '\\': '\\', '\'': '\'', '"': '"', '`': '`', '?': '?'}
	if c, ok := simple[s[1]]; ok {
		val.WriteByte(c)
		return 2, nil
	}
	digits, base := 0, 0
	switch s[1] {
	case 'x', 'X':
		digits, base = 2, 16
	case 'u':
		digits, base = 4, 16
	case 'U':
		digits, base = 8, 16
	case '0', '1', '2', '3':
		digits, base = 3, 8
	default:
		return 0, fmt.Errorf("unknown escape \\%c", s[1])
	}
	start := 2
	if base == 8 {
		start = 1
	}
	if len(s) < start+digits {
		return 0, fmt.Errorf("short escape")
	}
	v, err := strconv.ParseUint(s[start:start+digits], base, 32)
	if err != nil {
		return 0, fmt.Errorf("bad escape %q", s[:start+digits])
	}
	if (base == 8 || digits == 2) && (isBytes || v < utf8.RuneSelf) {
		val.WriteByte(byte(v))
	} else {
		val.WriteRune(rune(v))
	}
	return start + digits, nil
}
