package install

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// Every field of Istio's install API is a field of discovery's types, with
// a verdict (acted on, no effect, refused): so that nothing Istio's users
// write is refused as unknown, and nothing is silently ignored. Istio's
// values are its values_types.proto (the Values message), its
// IstioOperator spec the Go types of operator/pkg/apis/types.go, both
// read from the pinned istio.io/istio.

// protoField is one field of a proto message.
type protoField struct {
	name, jsonName, typ string
}

var (
	protoMessageRe = regexp.MustCompile(`^\s*message\s+(\w+)\s*\{`)
	protoEnumRe    = regexp.MustCompile(`^\s*enum\s+\w+\s*\{`)
	protoFieldRe   = regexp.MustCompile(`^\s*(?:repeated\s+)?(map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+\s*(?:\[(.*)\])?\s*;`)
	protoJSONName  = regexp.MustCompile(`json_name\s*=\s*"([^"]+)"`)
)

// parseProtoMessages reads the messages of a .proto file: name -> fields.
func parseProtoMessages(t *testing.T, path string) map[string][]protoField {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]protoField{}
	var stack []string // "" for an enum or other block
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		switch {
		case protoMessageRe.MatchString(line):
			stack = append(stack, protoMessageRe.FindStringSubmatch(line)[1])
			continue
		case protoEnumRe.MatchString(line) || strings.HasSuffix(strings.TrimSpace(line), "{"):
			stack = append(stack, "")
			continue
		case strings.TrimSpace(line) == "}":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if len(stack) == 0 || stack[len(stack)-1] == "" {
			continue
		}
		m := protoFieldRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := protoField{name: m[2], typ: m[1], jsonName: lowerCamel(m[2])}
		if j := protoJSONName.FindStringSubmatch(m[3]); j != nil {
			f.jsonName = j[1]
		}
		msg := stack[len(stack)-1]
		out[msg] = append(out[msg], f)
	}
	return out
}

// lowerCamel is protoc's JSON name of a field.
func lowerCamel(s string) string {
	var b strings.Builder
	up := false
	for _, r := range s {
		if r == '_' {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
			up = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// missingProtoFields walks message msg against Go type t and names the
// proto fields t lacks.
func missingProtoFields(msgs map[string][]protoField, msg string, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || strings.HasPrefix(t.PkgPath(), "k8s.io/") {
		return nil
	}
	fields := fieldsOf(t)
	var out []string
	for _, pf := range msgs[msg] {
		f, ok := fields[pf.jsonName]
		if !ok {
			f, ok = fields[pf.name]
		}
		if !ok {
			out = append(out, path+"."+pf.jsonName)
			continue
		}
		if _, isMsg := msgs[pf.typ]; isMsg && (f.check == kindTyped || f.check == kindInstaller) {
			out = append(out, missingProtoFields(msgs, pf.typ, f.typ, path+"."+pf.jsonName)...)
		}
	}
	return out
}

func TestEveryIstioValueHasAVerdict(t *testing.T) {
	root := pinnedIstioDir(t)
	msgs := parseProtoMessages(t, filepath.Join(root, "operator/pkg/apis/values_types.proto"))
	if len(msgs["Values"]) < 15 || len(msgs["GlobalConfig"]) < 40 {
		t.Fatalf("parsed too little of values_types.proto: Values %d fields, GlobalConfig %d", len(msgs["Values"]), len(msgs["GlobalConfig"]))
	}
	for _, p := range missingProtoFields(msgs, "Values", reflect.TypeFor[Values](), "values") {
		t.Errorf("%s: Istio's value is not a field of pkg/install's types (give it a verdict)", p)
	}
}

// goStructFields reads the JSON field names of the Go structs of a file:
// struct name -> json name -> Go type expression.
func goStructFields(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return true
		}
		fields := map[string]string{}
		for _, fl := range st.Fields.List {
			typ := strings.TrimLeft(exprString(fl.Type), "*[]")
			if fl.Tag == nil {
				if len(fl.Names) == 0 {
					fields["inline:"+typ] = typ // embedded
				}
				continue
			}
			tag := reflect.StructTag(strings.Trim(fl.Tag.Value, "`")).Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if name == "" || name == "-" {
				if len(fl.Names) == 0 {
					fields["inline:"+typ] = typ
				}
				continue
			}
			fields[name] = typ
		}
		out[ts.Name.Name] = fields
		return true
	})
	return out
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return "*" + exprString(x.X)
	case *ast.ArrayType:
		return "[]" + exprString(x.Elt)
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	case *ast.MapType:
		return "map"
	}
	return "?"
}

// missingGoFields walks Istio's Go struct name against t.
func missingGoFields(structs map[string]map[string]string, name string, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	ours := fieldsOf(t)
	var out []string
	for jname, typ := range structs[name] {
		if inner, ok := strings.CutPrefix(jname, "inline:"); ok {
			out = append(out, missingGoFields(structs, inner, t, path)...)
			continue
		}
		if jname == "metadata" || jname == "apiVersion" || jname == "kind" {
			continue
		}
		f, ok := ours[jname]
		if !ok {
			out = append(out, path+"."+jname)
			continue
		}
		if _, isStruct := structs[typ]; isStruct && f.check == kindTyped && typ != "BoolValue" {
			out = append(out, missingGoFields(structs, typ, f.typ, path+"."+jname)...)
		}
	}
	return out
}

func TestEveryIstioOperatorFieldHasAVerdict(t *testing.T) {
	root := pinnedIstioDir(t)
	structs := goStructFields(t, filepath.Join(root, "operator/pkg/apis/types.go"))
	if len(structs["IstioOperatorSpec"]) < 10 || len(structs["KubernetesResources"]) < 15 {
		t.Fatalf("parsed too little of types.go: %v", structs)
	}
	for _, p := range missingGoFields(structs, "IstioOperatorSpec", specType, "spec") {
		if strings.HasPrefix(p, "spec.values.") {
			continue // TestEveryIstioValueHasAVerdict
		}
		t.Errorf("%s: Istio's IstioOperator field is not a field of pkg/install's types (give it a verdict)", p)
	}
}
