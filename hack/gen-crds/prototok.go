package main

import "strings"

// protoToken is one token of a .proto file with the comment protoc would
// record as the leading comment of a declaration starting at it.
type protoToken struct {
	text    string
	line    int
	leading string
}

// tokenizeProto splits src into tokens. Comments are attributed as protoc's
// tokenizer does (google/protobuf/io/tokenizer.cc, NextWithComments):
//
//   - a comment on the same line as the previous token is that token's
//     trailing comment;
//   - otherwise the first block of comment lines after the previous token
//     is its trailing comment if a blank line follows the block;
//   - a block separated from the next token by a blank line is detached;
//   - what remains, the block directly above the next token, is the
//     token's leading comment. Consecutive "//" lines form one block.
func tokenizeProto(src string) []protoToken {
	s := &protoScanner{src: src, line: 1}
	var toks []protoToken
	for start := true; ; start = false {
		leading := s.comments(start)
		tok, ok := s.token()
		if !ok {
			return toks
		}
		tok.leading = leading
		toks = append(toks, tok)
	}
}

type protoScanner struct {
	src  string
	pos  int
	line int
}

func (s *protoScanner) at(prefix string) bool { return strings.HasPrefix(s.src[s.pos:], prefix) }

func (s *protoScanner) eof() bool { return s.pos >= len(s.src) }

func (s *protoScanner) consumeNewline() bool {
	if s.at("\n") {
		s.pos++
		s.line++
		return true
	}
	return false
}

func (s *protoScanner) skipBlanks() {
	for !s.eof() && (s.src[s.pos] == ' ' || s.src[s.pos] == '\t' || s.src[s.pos] == '\r' || s.src[s.pos] == '\f' || s.src[s.pos] == '\v') {
		s.pos++
	}
}

// lineComment consumes "//..." through the end of the line and returns
// the text after "//", newline included.
func (s *protoScanner) lineComment() string {
	s.pos += 2
	end := strings.IndexByte(s.src[s.pos:], '\n')
	if end < 0 {
		text := s.src[s.pos:]
		s.pos = len(s.src)
		return text
	}
	text := s.src[s.pos : s.pos+end+1]
	s.pos += end + 1
	s.line++
	return text
}

// blockComment consumes "/* ... */" and returns its text with the leading
// blanks and "*" of each continuation line removed.
func (s *protoScanner) blockComment() string {
	s.pos += 2
	end := strings.Index(s.src[s.pos:], "*/")
	var body string
	if end < 0 {
		body, s.pos = s.src[s.pos:], len(s.src)
	} else {
		body = s.src[s.pos : s.pos+end]
		s.pos += end + 2
	}
	s.line += strings.Count(body, "\n")
	lines := strings.Split(body, "\n")
	for i := 1; i < len(lines); i++ {
		l := strings.TrimLeft(lines[i], " \t")
		lines[i] = strings.TrimPrefix(l, "*")
	}
	return strings.Join(lines, "\n")
}

// comments consumes the blanks and comments before the next token and
// returns that token's leading comment.
func (s *protoScanner) comments(start bool) string {
	var buf strings.Builder
	has, isLine := false, false
	flush := func() {
		// The block is the previous token's trailing comment or a detached
		// one: neither is kept.
		buf.Reset()
		has = false
	}
	if !start {
		s.skipBlanks()
		switch {
		case s.at("//"):
			s.lineComment() // trailing
		case s.at("/*"):
			s.blockComment() // trailing
			s.skipBlanks()
			if !s.consumeNewline() {
				return ""
			}
		default:
			if !s.consumeNewline() {
				return "" // the next token is on the same line
			}
		}
	}
	for {
		s.skipBlanks()
		switch {
		case s.at("//"):
			if has && !isLine {
				flush()
			}
			buf.WriteString(s.lineComment())
			has, isLine = true, true
		case s.at("/*"):
			if has {
				flush()
			}
			buf.WriteString(s.blockComment())
			has, isLine = true, false
			s.skipBlanks()
			s.consumeNewline()
		case s.consumeNewline(): // a blank line
			flush()
		default:
			if s.eof() || s.at("}") {
				return "" // the end of a scope: nothing to attach to
			}
			if !has {
				return ""
			}
			return buf.String()
		}
	}
}

// token reads one token: a (possibly dotted) identifier or number, a
// quoted string, or one punctuation character.
func (s *protoScanner) token() (protoToken, bool) {
	if s.eof() {
		return protoToken{}, false
	}
	start, line := s.pos, s.line
	c := s.src[s.pos]
	switch {
	case isWordByte(c):
		for !s.eof() && isWordByte(s.src[s.pos]) {
			s.pos++
		}
	case c == '"' || c == '\'':
		s.pos++
		for !s.eof() && s.src[s.pos] != c {
			if s.src[s.pos] == '\\' {
				s.pos++
			}
			if !s.eof() && s.src[s.pos] == '\n' {
				s.line++
			}
			s.pos++
		}
		s.pos++
		if s.pos > len(s.src) {
			s.pos = len(s.src)
		}
	default:
		s.pos++
	}
	return protoToken{text: s.src[start:s.pos], line: line}, true
}

func isWordByte(c byte) bool {
	return c == '_' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}
