package main

import (
	"regexp"
	"strings"
)

// The printer writes an expression the way cel-go's parser.Unparse does
// with its default options, which is what Istio's CRDs carry: one space
// around binary operators, parentheses only where precedence needs them
// (and around a conditional's complex operands), string literals
// double-quoted, and a line break after a && or || once a line reaches
// 80 columns.

// celPrecedence is cel-go's operator precedence (a larger number binds
// more loosely); functions have 0.
var celPrecedence = map[string]int{
	opConditional: 8,
	opOr:          7,
	opAnd:         6,
	"_==_":        5, "_!=_": 5, "_<_": 5, "_<=_": 5, "_>_": 5, "_>=_": 5, "@in": 5,
	"_+_": 4, "_-_": 4,
	"_*_": 3, "_/_": 3, "_%_": 3,
	opNot: 2, opNegate: 2,
	opIndex: 1,
}

// celBinarySymbols are the operators written between their operands.
var celBinarySymbols = map[string]string{
	opOr: "||", opAnd: "&&",
	"_==_": "==", "_!=_": "!=", "_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">=", "@in": "in",
	"_+_": "+", "_-_": "-", "_*_": "*", "_/_": "/", "_%_": "%",
}

const celWrapColumn = 80

func unparseCEL(e celExpr) string {
	u := &celPrinter{}
	u.visit(e)
	return u.out.String()
}

type celPrinter struct {
	out         strings.Builder
	lastWrapped int
}

func (u *celPrinter) visit(e celExpr) {
	switch e := e.(type) {
	case *celIdent:
		u.out.WriteString(e.name)
	case *celLiteral:
		u.out.WriteString(e.text)
	case *celSelect:
		u.nested(e.operand, isBinaryOrConditional(e.operand))
		u.out.WriteString(".")
		u.out.WriteString(quoteCELField(e.field))
	case *celList:
		u.out.WriteString("[")
		u.list(e.elems)
		u.out.WriteString("]")
	case *celMap:
		u.out.WriteString("{")
		for i := range e.keys {
			if i > 0 {
				u.out.WriteString(", ")
			}
			u.visit(e.keys[i])
			u.out.WriteString(": ")
			u.visit(e.values[i])
		}
		u.out.WriteString("}")
	case *celCall:
		u.call(e)
	}
}

func (u *celPrinter) list(elems []celExpr) {
	for i, el := range elems {
		if i > 0 {
			u.out.WriteString(", ")
		}
		u.visit(el)
	}
}

func (u *celPrinter) call(c *celCall) {
	switch sym, binary := celBinarySymbols[c.fn]; {
	case c.fn == opConditional:
		for i, a := range c.args {
			u.nested(a, samePrecedence(opConditional, a) || isComplex(a))
			switch i {
			case 0:
				u.operator(opConditional, "?")
			case 1:
				u.out.WriteString(" : ")
			}
		}
	case c.fn == opIndex:
		u.nested(c.args[0], isBinaryOrConditional(c.args[0]))
		u.out.WriteString("[")
		u.visit(c.args[1])
		u.out.WriteString("]")
	case c.fn == opNot || c.fn == opNegate:
		u.out.WriteString(strings.Trim(c.fn, "_"))
		u.nested(c.args[0], isComplex(c.args[0]))
	case binary:
		lhs, rhs := c.args[0], c.args[1]
		rhsParen := complexWithRespectTo(c.fn, rhs)
		if !rhsParen && c.fn != opAnd && c.fn != opOr { // left-associative
			rhsParen = samePrecedence(c.fn, rhs)
		}
		u.nested(lhs, complexWithRespectTo(c.fn, lhs))
		u.operator(c.fn, sym)
		u.nested(rhs, rhsParen)
	default:
		if c.target != nil {
			u.nested(c.target, isBinaryOrConditional(c.target))
			u.out.WriteString(".")
		}
		u.out.WriteString(c.fn)
		u.out.WriteString("(")
		u.list(c.args)
		u.out.WriteString(")")
	}
}

func (u *celPrinter) nested(e celExpr, paren bool) {
	if paren {
		u.out.WriteString("(")
	}
	u.visit(e)
	if paren {
		u.out.WriteString(")")
	}
}

// operator writes a binary or conditional operator; after && and || it
// breaks the line once the line, counted with the operator's internal
// name as cel-go counts it, reaches the wrap column.
func (u *celPrinter) operator(fn, sym string) {
	if (fn == opAnd || fn == opOr) && u.out.Len()-u.lastWrapped+len(fn) >= celWrapColumn {
		u.lastWrapped = u.out.Len()
		u.out.WriteString(" " + sym + "\n")
		return
	}
	u.out.WriteString(" " + sym + " ")
}

// isComplex reports whether e is a call with two or more arguments (the
// receiver of a method not counted): an operator or a function.
func isComplex(e celExpr) bool {
	c, ok := e.(*celCall)
	return ok && len(c.args) >= 2
}

func samePrecedence(op string, e celExpr) bool {
	c, ok := e.(*celCall)
	return ok && celPrecedence[op] == celPrecedence[c.fn]
}

func complexWithRespectTo(op string, e celExpr) bool {
	c, ok := e.(*celCall)
	return ok && len(c.args) >= 2 && celPrecedence[op] < celPrecedence[c.fn]
}

func isBinaryOrConditional(e celExpr) bool {
	c, ok := e.(*celCall)
	if !ok || len(c.args) < 2 {
		return false
	}
	_, binary := celBinarySymbols[c.fn]
	return binary || celPrecedence[c.fn] == celPrecedence[opConditional]
}

var celFieldName = regexp.MustCompile(`^[A-Za-z_][0-9A-Za-z_]*$`)

func quoteCELField(f string) string {
	if !celFieldName.MatchString(f) || f == "in" {
		return "`" + f + "`"
	}
	return f
}
