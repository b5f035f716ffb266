package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// The annotations that Istio's CRD generator reads (+kubebuilder:...,
// +protoc-gen-crd:..., +cue-gen:...) live in the comments of istio.io/api's
// .proto files, and protoc-gen-go leaves comments out of the descriptors
// compiled into Go. So the comments are read from the .proto files of the
// istio.io/api module that go.mod requires (the same module whose
// descriptors give the types), with protoc's rules for which comment
// belongs to which declaration.

// protoComments maps the full name of a message ("istio.networking.v1alpha3.VirtualService")
// or field ("istio.networking.v1alpha3.VirtualService.hosts") to its leading comment as
// protoc records it: the comment lines, "//" stripped, each ending in "\n".
// A declaration without a comment is present with "".
type protoComments map[protoreflect.FullName]string

// apiModuleDir returns the directory of the istio.io/api module that the
// main module requires.
func apiModuleDir() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-json", "istio.io/api")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m istio.io/api: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go list -m istio.io/api: %w", err)
	}
	if m.Dir == "" {
		return "", fmt.Errorf("go list -m istio.io/api: module not downloaded (run go mod download istio.io/api)")
	}
	return m.Dir, nil
}

// readFile parses the .proto file at path (relative to dir, as in the
// descriptor's ParentFile().Path()) into c.
func (c protoComments) readFile(dir, path string) error {
	src, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(path)))
	if err != nil {
		return err
	}
	if err := c.parse(string(src)); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// parse records the leading comments of the messages and fields of one
// .proto file. It understands the subset of the language that declares
// them (package, message, oneof, fields, maps) and skips the rest
// (imports, options, enums, services, reserved ranges) by balanced braces.
func (c protoComments) parse(src string) error {
	p := &protoParser{toks: tokenizeProto(src), out: c}
	return p.file()
}

type protoParser struct {
	toks []protoToken
	i    int
	pkg  string
	out  protoComments
}

func (p *protoParser) peek() protoToken {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return protoToken{}
}

func (p *protoParser) next() protoToken {
	t := p.peek()
	if p.i < len(p.toks) {
		p.i++
	}
	return t
}

func (p *protoParser) expect(text string) error {
	if t := p.next(); t.text != text {
		return fmt.Errorf("line %d: want %q, have %q", t.line, text, t.text)
	}
	return nil
}

func (p *protoParser) file() error {
	for p.i < len(p.toks) {
		t := p.peek()
		switch t.text {
		case "package":
			p.next()
			p.pkg = p.next().text
			if err := p.expect(";"); err != nil {
				return err
			}
		case "message":
			if err := p.message(p.pkg); err != nil {
				return err
			}
		default:
			if err := p.skipStatement(); err != nil {
				return err
			}
		}
	}
	return nil
}

// message parses "message Name { ... }" in scope (a package or message
// full name).
func (p *protoParser) message(scope string) error {
	kw := p.next()
	name := p.next().text
	full := join(scope, name)
	p.out[protoreflect.FullName(full)] = kw.leading
	if err := p.expect("{"); err != nil {
		return err
	}
	return p.body(full, true)
}

// body parses declarations until the closing brace: a message's, or a
// oneof's (which holds only fields and options).
func (p *protoParser) body(msg string, isMessage bool) error {
	for {
		t := p.peek()
		switch {
		case t.text == "":
			return fmt.Errorf("message %s: unexpected end of file", msg)
		case t.text == "}":
			p.next()
			return nil
		case t.text == ";":
			p.next()
		case isMessage && t.text == "message":
			if err := p.message(msg); err != nil {
				return err
			}
		case isMessage && t.text == "oneof":
			p.next()
			p.next() // the oneof's name
			if err := p.expect("{"); err != nil {
				return err
			}
			if err := p.body(msg, false); err != nil {
				return err
			}
		case t.text == "option" || (isMessage && (t.text == "enum" || t.text == "reserved" || t.text == "extensions" || t.text == "extend")):
			if err := p.skipStatement(); err != nil {
				return err
			}
		default:
			if err := p.field(msg); err != nil {
				return err
			}
		}
	}
}

// field parses "[repeated|optional|required] Type name = N [opts];" or
// "map<K, V> name = N [opts];".
func (p *protoParser) field(msg string) error {
	first := p.next()
	t := first
	if t.text == "repeated" || t.text == "optional" || t.text == "required" {
		t = p.next()
	}
	if t.text == "map" && p.peek().text == "<" {
		for p.next().text != ">" {
			if p.i >= len(p.toks) {
				return fmt.Errorf("line %d: unterminated map type", t.line)
			}
		}
	}
	name := p.next()
	if p.peek().text != "=" || !isProtoIdent(name.text) {
		return fmt.Errorf("line %d: in message %s: cannot parse a field at %q", first.line, msg, first.text)
	}
	p.out[protoreflect.FullName(join(msg, name.text))] = first.leading
	return p.skipStatement()
}

// skipStatement skips up to and including the ";" that ends a statement,
// or the "}" that closes a braced one, at nesting depth zero.
func (p *protoParser) skipStatement() error {
	depth := 0
	for p.i < len(p.toks) {
		t := p.next()
		switch t.text {
		case "{", "[", "(":
			depth++
		case "}", "]", ")":
			depth--
			if depth == 0 && t.text == "}" {
				if p.peek().text == ";" {
					p.next()
				}
				return nil
			}
			if depth < 0 {
				return fmt.Errorf("line %d: unbalanced %q", t.line, t.text)
			}
		case ";":
			if depth == 0 {
				return nil
			}
		}
	}
	return nil
}

func join(scope, name string) string {
	if scope == "" {
		return name
	}
	return scope + "." + name
}

func isProtoIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9') {
			continue
		}
		return false
	}
	return true
}

// protoSource gives the leading comment of a message or field, reading
// the .proto file that declares it on first use.
type protoSource struct {
	dir      string
	comments protoComments
	read     map[string]bool
}

func newProtoSource(dir string) *protoSource {
	return &protoSource{dir: dir, comments: protoComments{}, read: map[string]bool{}}
}

// comment returns d's leading comment. It fails if d's file does not
// declare d where the parser can see it, so that a parser gap cannot drop
// annotations unnoticed.
func (p *protoSource) comment(d protoreflect.Descriptor) (string, error) {
	path := d.ParentFile().Path()
	if !p.read[path] {
		if err := p.comments.readFile(p.dir, path); err != nil {
			return "", fmt.Errorf("read comments: %w", err)
		}
		p.read[path] = true
	}
	c, ok := p.comments[d.FullName()]
	if !ok {
		return "", fmt.Errorf("%s: no declaration of %s found", path, d.FullName())
	}
	return c, nil
}
