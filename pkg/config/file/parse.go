package file

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/webhook/validate"
)

// Object is one object read from a config file.
type Object struct {
	Key model.Key
	// Object is the typed object model.Event documents (for Istio kinds the
	// v1 type, whatever version the file used).
	Object runtime.Object
	// Doc, Item and Line say where the object is, as in DocError.
	Doc, Item, Line int
	// Hash identifies the object's content (its document, as canonical
	// JSON). It is also the object's resourceVersion.
	Hash string
	// Warnings are what Istio's validation would warn about the object
	// (validate.Check): it is loaded all the same.
	Warnings []string
}

// Parse reads a stream of YAML (or JSON) documents, each an object with
// apiVersion and kind, or a v1 List of them. It returns the objects it
// could decode, in order, and one error per document (or List item) it
// could not. file only names the source in errors.
func Parse(file string, data []byte) ([]Object, []*DocError) {
	p := parser{file: file}
	for i, d := range splitDocuments(data) {
		p.document(i, d)
	}
	return p.objs, p.errs
}

// document is one document of a YAML stream.
type document struct {
	line int    // 1-based line of its first line that is not blank or a comment
	text []byte // from that line to the end of the document
	err  error  // set when the document cannot be read at all
}

// splitDocuments cuts a YAML stream at its "---" lines. Documents of only
// blank lines and comments are dropped.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine := -1, 0
	var pending error // the current document's separator line was bad
	flush := func(end int) {
		switch {
		case pending != nil:
			docs = append(docs, document{line: startLine, err: pending})
		case start >= 0:
			docs = append(docs, document{line: startLine, text: data[start:end]})
		}
		start, pending = -1, nil
	}
	for off, lineNo := 0, 1; off < len(data); lineNo++ {
		end, next := len(data), len(data)
		if nl := bytes.IndexByte(data[off:], '\n'); nl >= 0 {
			end, next = off+nl, off+nl+1
		}
		line := data[off:end]
		if sep, content := separator(line); sep {
			flush(off)
			if content {
				pending = errors.New(`content after the document separator "---" is not supported; start it on the next line`)
				startLine = lineNo
			}
		} else if start < 0 && pending == nil && isContent(line) {
			start, startLine = off, lineNo
		}
		off = next
	}
	flush(len(data))
	return docs
}

// separator reports whether line is a document separator ("---", maybe
// followed by blanks and a comment) and whether other content follows it.
func separator(line []byte) (sep, content bool) {
	line = bytes.TrimRight(line, "\r")
	if !bytes.HasPrefix(line, []byte("---")) {
		return false, false
	}
	rest := line[3:]
	if len(rest) == 0 {
		return true, false
	}
	if rest[0] != ' ' && rest[0] != '\t' {
		return false, false // "----" or "---x" is content
	}
	rest = bytes.TrimSpace(rest)
	return true, len(rest) > 0 && rest[0] != '#'
}

func isContent(line []byte) bool {
	line = bytes.TrimSpace(line)
	return len(line) > 0 && line[0] != '#'
}

type parser struct {
	file string
	objs []Object
	errs []*DocError
}

func (p *parser) fail(doc, item, line int, err error) {
	p.errs = append(p.errs, &DocError{File: p.file, Doc: doc, Item: item, Line: line, Err: err})
}

func (p *parser) document(doc int, d document) {
	if d.err != nil {
		p.fail(doc, -1, d.line, d.err)
		return
	}
	js, err := yaml.YAMLToJSONStrict(d.text)
	if err != nil {
		p.fail(doc, -1, d.line, absoluteLines(err, d.line))
		return
	}
	if string(js) == "null" {
		return // a document of just "~" or "null"
	}
	if js[0] != '{' {
		p.fail(doc, -1, d.line, errors.New("a document must be an object with apiVersion and kind"))
		return
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err == nil && tm.Kind == "List" && tm.APIVersion == "v1" {
		p.list(doc, d.line, js)
		return
	}
	p.object(doc, -1, d.line, js)
}

// list reads a v1 List, whose items are objects.
func (p *parser) list(doc, line int, js []byte) {
	var l struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ListMeta   `json:"metadata"`
		Items           []json.RawMessage `json:"items"`
	}
	if err := strictUnmarshal(js, &l); err != nil {
		p.fail(doc, -1, line, fmt.Errorf("List: %w", err))
		return
	}
	for i, item := range l.Items {
		item = bytes.TrimSpace(item)
		if len(item) == 0 || item[0] != '{' {
			p.fail(doc, i, line, errors.New("a List item must be an object with apiVersion and kind"))
			continue
		}
		p.object(doc, i, line, item)
	}
}

// object decodes one object from canonical JSON.
func (p *parser) object(doc, item, line int, js []byte) {
	obj, key, warnings, err := decodeObject(js)
	if err != nil {
		p.fail(doc, item, line, err)
		return
	}
	sum := sha256.Sum256(js)
	hash := hex.EncodeToString(sum[:12])
	// The Store tells Istio config revisions apart by resourceVersion: the
	// content hash changes exactly when the content does.
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(hash)
	}
	p.objs = append(p.objs, Object{Key: key, Object: obj, Doc: doc, Item: item, Line: line, Hash: hash, Warnings: warnings})
}

// decodeObject decodes an object and, for Istio kinds, judges it as
// /validate does (validate.Check: the same function, so that file mode and
// the webhook cannot disagree), returning Istio's warnings.
func decodeObject(js []byte) (runtime.Object, model.Key, []string, error) {
	obj, key, err := decodeTyped(js)
	if err != nil || !key.Kind.IsIstio() {
		return obj, key, nil, err
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	w, err := validate.Check(gvk.GroupKind(), js)
	if err != nil {
		return nil, model.Key{}, nil, checkError(err)
	}
	return obj, key, w.Istio, nil
}

// checkError drops what validate.Check's errors repeat of the kind and
// name, which the document's position already gives.
func checkError(err error) error {
	var ie *validate.InvalidError
	if errors.As(err, &ie) {
		return fmt.Errorf("%s: %s", ie.Kind, strings.Join(ie.Problems, "; "))
	}
	return err
}

func decodeTyped(js []byte) (runtime.Object, model.Key, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, model.Key{}, fmt.Errorf("apiVersion and kind: %w", err)
	}
	switch {
	case tm.APIVersion == "":
		return nil, model.Key{}, errors.New("apiVersion is missing")
	case tm.Kind == "":
		return nil, model.Key{}, errors.New("kind is missing")
	case tm.Kind == "List":
		return nil, model.Key{}, errors.New("a List inside a List is not supported")
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return nil, model.Key{}, err
	}
	kind, err := model.KindFor(gv.WithKind(tm.Kind))
	if err != nil {
		return nil, model.Key{}, err
	}
	// Every served version of a kind has the same Go type (Istio's older
	// versions alias the v1 spec), so the v1 type reads all of them.
	gvk := kind.GroupVersionKind()
	obj, err := model.Scheme().New(gvk)
	if err != nil {
		return nil, model.Key{}, fmt.Errorf("%s: %w", gvk, err)
	}
	if kind.IsIstio() {
		// First, for the spec decoder's clearer messages (and its refusal
		// of unknown fields, which the types' own decoder drops).
		if err := strictSpec(obj, js); err != nil {
			return nil, model.Key{}, fmt.Errorf("%s: %w", kind, err)
		}
	}
	if err := strictUnmarshal(js, obj); err != nil {
		return nil, model.Key{}, fmt.Errorf("%s: %w", kind, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	key, err := objectKey(kind, obj)
	if err != nil {
		return nil, model.Key{}, fmt.Errorf("%s: %w", kind, err)
	}
	return obj, key, nil
}

// strictUnmarshal decodes js into v, rejecting unknown and duplicate fields.
func strictUnmarshal(js []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(js, v)
	if err != nil {
		return cleanProtoError(err)
	}
	return errors.Join(strict...)
}

// strictSpec decodes an Istio object's spec again, rejecting unknown fields:
// the Istio types' own JSON decoding ignores them, so a misspelt field
// would otherwise vanish silently.
func strictSpec(obj runtime.Object, js []byte) error {
	var raw struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(js, &raw); err != nil || len(raw.Spec) == 0 || string(raw.Spec) == "null" {
		return nil
	}
	field := reflect.ValueOf(obj).Elem().FieldByName("Spec")
	if !field.IsValid() {
		return nil
	}
	msg, ok := field.Addr().Interface().(proto.Message)
	if !ok {
		return nil
	}
	// Istio's decoder, as /validate uses it: Go durations ("3m") too.
	fresh := msg.ProtoReflect().New().Interface()
	if err := validate.DecodeSpec(raw.Spec, fresh); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

// protoPosition is the position that protobuf's JSON errors give within
// the JSON they were handed: meaningless to someone reading the YAML.
// protobuf's "proto: " prefix (whose space is sometimes a no-break space)
// says nothing to them either.
var (
	protoPosition = regexp.MustCompile(`[ \x{a0}]?\(line \d+:\d+\)`)
	protoPrefix   = regexp.MustCompile(`proto:[ \x{a0}]?:? ?`)
)

func cleanProtoError(err error) error {
	msg := err.Error()
	clean := protoPrefix.ReplaceAllString(protoPosition.ReplaceAllString(msg, ""), "")
	if clean != msg {
		return errors.New(clean)
	}
	return err
}

// objectKey checks the object's name and namespace and returns its key.
// Namespaced objects without a namespace go to "default".
func objectKey(kind model.Kind, obj runtime.Object) (model.Key, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return model.Key{}, err
	}
	name := m.GetName()
	if name == "" {
		return model.Key{}, errors.New("metadata.name is missing")
	}
	var problems []string
	switch kind {
	case model.KindNamespace:
		problems = validation.IsDNS1123Label(name)
	case model.KindService:
		problems = validation.IsDNS1035Label(name)
	default:
		problems = validation.IsDNS1123Subdomain(name)
	}
	if len(problems) > 0 {
		return model.Key{}, fmt.Errorf("metadata.name %q: %s", name, strings.Join(problems, "; "))
	}
	if !kind.Namespaced() {
		m.SetNamespace("")
		return model.Key{Kind: kind, Name: name}, nil
	}
	ns := m.GetNamespace()
	if ns == "" {
		ns = "default"
		m.SetNamespace(ns)
	}
	if problems := validation.IsDNS1123Label(ns); len(problems) > 0 {
		return model.Key{}, fmt.Errorf("metadata.namespace %q: %s", ns, strings.Join(problems, "; "))
	}
	return model.Key{Kind: kind, Namespace: ns, Name: name}, nil
}

// yamlLine finds the line numbers in YAML decoder messages, which count
// from the start of the document.
var yamlLine = regexp.MustCompile(`\bline (\d+)\b`)

// absoluteLines rewrites the line numbers of a YAML decoder error to count
// from the start of the file.
func absoluteLines(err error, docLine int) error {
	msg := err.Error()
	out := yamlLine.ReplaceAllStringFunc(msg, func(s string) string {
		n, convErr := strconv.Atoi(s[len("line "):])
		if convErr != nil {
			return s
		}
		return "line " + strconv.Itoa(n+docLine-1)
	})
	if out == msg {
		return err
	}
	return errors.New(out)
}
