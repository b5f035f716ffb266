package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Istio's CRD generator does not copy an XValidation rule into the CRD as
// written: it parses it with cel-go, expanding three macros of its own
// (github.com/howardjohn/celpp), and writes the expression back with
// cel-go's unparser. preprocessCEL does the same, so that a rule written
//
//	default(self.resolution, 'NONE') == 'NONE' ? !has(self.endpoints) : true
//
// lands in the CRD as Istio's does:
//
//	((has(self.resolution) ? self.resolution : "NONE") == "NONE") ? !has(self.endpoints) : true
//
// The macros:
//
//	default(x, d)        has(x) ? x : d
//	oneof(a, b, ...)     (has(a) ? 1 : 0) + (has(b) ? 1 : 0) + ... <= 1
//	e.index(d, f, g)     (has(e.f) && has(e.f.g)) ? e.f.g : d
//
// No other macro is expanded (cel-go's own, such as all or exists, stay
// calls, as in Istio's output, and the API server expands them).
func preprocessCEL(rule string) (string, error) {
	toks, err := lexCEL(rule)
	if err != nil {
		return "", fmt.Errorf("CEL rule %q: %w", rule, err)
	}
	p := &celParser{toks: toks}
	e, err := p.expr()
	if err == nil && p.peek().kind != celEOF {
		err = fmt.Errorf("unexpected %q", p.peek().text)
	}
	if err != nil {
		return "", fmt.Errorf("CEL rule %q: %w", rule, err)
	}
	return unparseCEL(e), nil
}

// celExpr is a node of a parsed CEL expression: *celIdent, *celLiteral,
// *celSelect, *celCall, *celList or *celMap. Operators are calls named as
// cel-go names them ("_&&_", "_?_:_", "!_", "@in", ...).
type celExpr interface{ celNode() }

type celIdent struct{ name string }

// celLiteral holds a constant already written in the unparser's form.
type celLiteral struct{ text string }

type celSelect struct {
	operand celExpr
	field   string
}

type celCall struct {
	fn     string
	target celExpr // nil for a global function or an operator
	args   []celExpr
}

type celList struct{ elems []celExpr }

type celMap struct{ keys, values []celExpr }

func (*celIdent) celNode()   {}
func (*celLiteral) celNode() {}
func (*celSelect) celNode()  {}
func (*celCall) celNode()    {}
func (*celList) celNode()    {}
func (*celMap) celNode()     {}

const (
	opConditional = "_?_:_"
	opAnd         = "_&&_"
	opOr          = "_||_"
	opNot         = "!_"
	opNegate      = "-_"
	opIndex       = "_[_]"
	opAdd         = "_+_"
	opLessEquals  = "_<=_"
)

// The binary operators of each parser level below && (relations, then
// addition, then multiplication), by spelling.
var relationOps = map[string]string{"==": "_==_", "!=": "_!=_", "<": "_<_", "<=": "_<=_", ">": "_>_", ">=": "_>=_", "in": "@in"}

var additionOps = map[string]string{"+": "_+_", "-": "_-_"}

var multiplicationOps = map[string]string{"*": "_*_", "/": "_/_", "%": "_%_"}

type celParser struct {
	toks []celToken
	i    int
}

func (p *celParser) peek() celToken { return p.toks[p.i] }

func (p *celParser) next() celToken {
	t := p.toks[p.i]
	if t.kind != celEOF {
		p.i++
	}
	return t
}

func (p *celParser) accept(text string) bool {
	if t := p.peek(); t.kind == celPunct && t.text == text {
		p.i++
		return true
	}
	return false
}

func (p *celParser) expect(text string) error {
	if !p.accept(text) {
		return fmt.Errorf("want %q, have %q", text, p.peek().text)
	}
	return nil
}

// expr = or ["?" or ":" expr]
func (p *celParser) expr() (celExpr, error) {
	cond, err := p.or()
	if err != nil || !p.accept("?") {
		return cond, err
	}
	yes, err := p.or()
	if err != nil {
		return nil, err
	}
	if err := p.expect(":"); err != nil {
		return nil, err
	}
	no, err := p.expr()
	if err != nil {
		return nil, err
	}
	return &celCall{fn: opConditional, args: []celExpr{cond, yes, no}}, nil
}

func (p *celParser) or() (celExpr, error) {
	return p.leftAssoc(p.and, map[string]string{"||": opOr})
}

func (p *celParser) and() (celExpr, error) {
	return p.leftAssoc(p.relation, map[string]string{"&&": opAnd})
}

func (p *celParser) relation() (celExpr, error) {
	return p.leftAssoc(p.addition, relationOps)
}

func (p *celParser) addition() (celExpr, error) {
	return p.leftAssoc(p.multiplication, additionOps)
}

func (p *celParser) multiplication() (celExpr, error) {
	return p.leftAssoc(p.unary, multiplicationOps)
}

func (p *celParser) leftAssoc(operand func() (celExpr, error), ops map[string]string) (celExpr, error) {
	lhs, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		fn, ok := ops[t.text]
		if !ok || (t.kind != celPunct && !(t.kind == celIdentTok && t.text == "in")) {
			return lhs, nil
		}
		p.next()
		rhs, err := operand()
		if err != nil {
			return nil, err
		}
		lhs = &celCall{fn: fn, args: []celExpr{lhs, rhs}}
	}
}

// unary = member | "!"+ member | "-"+ member. As in cel-go, an even run
// of the same operator cancels out, and "-" before a number is part of
// the literal.
func (p *celParser) unary() (celExpr, error) {
	for _, op := range []struct{ text, fn string }{{"!", opNot}, {"-", opNegate}} {
		n := 0
		for p.peek().kind == celPunct && p.peek().text == op.text {
			p.next()
			n++
		}
		if n == 0 {
			continue
		}
		if op.text == "-" && n == 1 && p.peek().kind == celNumber {
			return p.member(&celLiteral{text: "-" + mustNumber(p.next())})
		}
		e, err := p.member(nil)
		if err != nil || n%2 == 0 {
			return e, err
		}
		return &celCall{fn: op.fn, args: []celExpr{e}}, nil
	}
	return p.member(nil)
}

// member = primary {"." ident ["(" args ")"] | "[" expr "]"}. base, when
// not nil, is an already parsed primary.
func (p *celParser) member(base celExpr) (celExpr, error) {
	e := base
	if e == nil {
		var err error
		if e, err = p.primary(); err != nil {
			return nil, err
		}
	}
	for {
		switch {
		case p.accept("."):
			t := p.next()
			if t.kind != celIdentTok {
				return nil, fmt.Errorf("want a field name after '.', have %q", t.text)
			}
			if !p.accept("(") {
				e = &celSelect{operand: e, field: t.text}
				continue
			}
			args, err := p.args(")")
			if err != nil {
				return nil, err
			}
			if e, err = expandMacro(&celCall{fn: t.text, target: e, args: args}); err != nil {
				return nil, err
			}
		case p.accept("["):
			idx, err := p.expr()
			if err != nil {
				return nil, err
			}
			if err := p.expect("]"); err != nil {
				return nil, err
			}
			e = &celCall{fn: opIndex, args: []celExpr{e, idx}}
		default:
			return e, nil
		}
	}
}

func (p *celParser) primary() (celExpr, error) {
	t := p.next()
	switch t.kind {
	case celNumber:
		return &celLiteral{text: mustNumber(t)}, nil
	case celString:
		return &celLiteral{text: t.text}, nil
	case celIdentTok:
		switch t.text {
		case "true", "false", "null":
			return &celLiteral{text: t.text}, nil
		}
		if !p.accept("(") {
			return &celIdent{name: t.text}, nil
		}
		args, err := p.args(")")
		if err != nil {
			return nil, err
		}
		return expandMacro(&celCall{fn: t.text, args: args})
	case celPunct:
		switch t.text {
		case "(":
			e, err := p.expr()
			if err != nil {
				return nil, err
			}
			return e, p.expect(")")
		case "[":
			elems, err := p.args("]")
			return &celList{elems: elems}, err
		case "{":
			return p.mapLiteral()
		}
	}
	return nil, fmt.Errorf("unexpected %q", t.text)
}

// args parses a comma-separated list of expressions up to close (a
// trailing comma allowed).
func (p *celParser) args(closer string) ([]celExpr, error) {
	var out []celExpr
	for !p.accept(closer) {
		if len(out) > 0 {
			if err := p.expect(","); err != nil {
				return nil, err
			}
			if p.accept(closer) {
				break
			}
		}
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (p *celParser) mapLiteral() (celExpr, error) {
	m := &celMap{}
	for !p.accept("}") {
		if len(m.keys) > 0 {
			if err := p.expect(","); err != nil {
				return nil, err
			}
			if p.accept("}") {
				break
			}
		}
		k, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.expect(":"); err != nil {
			return nil, err
		}
		v, err := p.expr()
		if err != nil {
			return nil, err
		}
		m.keys, m.values = append(m.keys, k), append(m.values, v)
	}
	return m, nil
}

// expandMacro replaces a call to one of Istio's macros by its expansion
// and returns any other call unchanged.
func expandMacro(c *celCall) (celExpr, error) {
	has := func(e celExpr) celExpr { return &celCall{fn: "has", args: []celExpr{e}} }
	cond := func(c, yes, no celExpr) celExpr { return &celCall{fn: opConditional, args: []celExpr{c, yes, no}} }
	switch {
	case c.target == nil && c.fn == "default" && len(c.args) == 2:
		return cond(has(c.args[0]), c.args[0], c.args[1]), nil
	case c.target == nil && c.fn == "oneof":
		if len(c.args) < 2 {
			return nil, fmt.Errorf("oneof requires at least 2 arguments")
		}
		var sum celExpr
		for _, a := range c.args {
			term := cond(has(a), &celLiteral{text: "1"}, &celLiteral{text: "0"})
			if sum == nil {
				sum = term
			} else {
				sum = &celCall{fn: opAdd, args: []celExpr{sum, term}}
			}
		}
		return &celCall{fn: opLessEquals, args: []celExpr{sum, &celLiteral{text: "1"}}}, nil
	case c.target != nil && c.fn == "index":
		if len(c.args) < 2 {
			return nil, fmt.Errorf("index requires a default and at least one field")
		}
		var check celExpr
		path := c.target
		for _, f := range c.args[1:] {
			id, ok := f.(*celIdent)
			if !ok {
				return nil, fmt.Errorf("index: fields must be names")
			}
			path = &celSelect{operand: path, field: id.name}
			if check == nil {
				check = has(path)
			} else {
				check = &celCall{fn: opAnd, args: []celExpr{check, has(path)}}
			}
		}
		return cond(check, path, c.args[0]), nil
	}
	return c, nil
}

// mustNumber writes a lexed number as the unparser does: ints in decimal,
// uints with a "u", doubles with the fewest digits that keep the value
// (and a ".0" when that looks like an int).
func mustNumber(t celToken) string {
	text := strings.ToLower(t.text)
	if strings.HasSuffix(text, "u") {
		v, err := strconv.ParseUint(strings.TrimSuffix(text, "u"), 0, 64)
		if err != nil {
			return t.text
		}
		return strconv.FormatUint(v, 10) + "u"
	}
	if !strings.HasPrefix(text, "0x") && strings.ContainsAny(text, ".e") {
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return t.text
		}
		d := strconv.FormatFloat(v, 'g', -1, 64)
		if !strings.ContainsAny(d, ".eE") {
			d += ".0"
		}
		return d
	}
	v, err := strconv.ParseInt(text, 0, 64)
	if err != nil {
		return t.text
	}
	return strconv.FormatInt(v, 10)
}
