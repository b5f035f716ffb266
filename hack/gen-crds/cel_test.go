package main

import (
	"strings"
	"testing"
)

func TestPreprocessCEL(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"default becomes a has() conditional": {
			in:   `default(self.resolution, 'NONE') == 'NONE' ? !has(self.endpoints) : true`,
			want: `((has(self.resolution) ? self.resolution : "NONE") == "NONE") ? !has(self.endpoints) : true`,
		},
		"oneof counts the fields that are set": {
			in:   `oneof(self.a, self.b, self.c)`,
			want: `(has(self.a) ? 1 : 0) + (has(self.b) ? 1 : 0) + (has(self.c) ? 1 : 0) <= 1`,
		},
		"index walks the fields safely, with a default": {
			in:   `has(self.p) ? self.index({}, selector, matchLabels).size() > 0 : true`,
			want: `has(self.p) ? (((has(self.selector) && has(self.selector.matchLabels)) ? self.selector.matchLabels : {}).size() > 0) : true`,
		},
		"cel-go's own macros stay calls": {
			in:   `self.all(l1, self.exists_one(l2, l1.number == l2.number))`,
			want: `self.all(l1, self.exists_one(l2, l1.number == l2.number))`,
		},
		"strings are double-quoted with Go escapes": {
			in:   `self.matches('^[a-z]"\'$') && r'\d' == "\x41\u00e9"`,
			want: `self.matches("^[a-z]\"'$") && "\\d" == "Aé"`,
		},
		"bytes are octal escapes": {
			in: `self == b'ab'`, want: `self == b"\141\142"`,
		},
		"numbers are normalized": {
			in: `[0x10, 1u, 1.50, 2e3, -3]`, want: `[16, 1u, 1.5, 2000.0, -3]`,
		},
		"parentheses that precedence needs stay, the others go": {
			in:   `((a + b) * c) == (a + (b + c)) && ((a + b) + c) > 0 && (x)`,
			want: `(a + b) * c == a + (b + c) && a + b + c > 0 && x`,
		},
		"a double negation cancels out": {
			in: `!!self.x && !(a || b)`, want: `self.x && !(a || b)`,
		},
		"a conditional as an operand or receiver is parenthesized": {
			in:   `(default(self.address, "").startsWith('unix://')) ? !has(self.ports) : true`,
			want: `(has(self.address) ? self.address : "").startsWith("unix://") ? !has(self.ports) : true`,
		},
		"a call of two arguments in a conditional is parenthesized": {
			in:   `self.startsWith('unix://') ? (self.substring(7,8) == '/' || self.substring(7,8) == '@') : true`,
			want: `self.startsWith("unix://") ? (self.substring(7, 8) == "/" || self.substring(7, 8) == "@") : true`,
		},
		"a line breaks after && once it reaches 80 columns": {
			in:   `(has(self.serviceAccounts) || has(self.notServiceAccounts)) ? (!has(self.principals) && !has(self.notPrincipals) && !has(self.namespaces) && !has(self.notNamespaces)) : true`,
			want: "(has(self.serviceAccounts) || has(self.notServiceAccounts)) ? (!has(self.principals) &&\n!has(self.notPrincipals) && !has(self.namespaces) && !has(self.notNamespaces)) : true",
		},
		"in, maps and indexes": {
			in:   `self['a'] in {'x': 1, 'y': [true, null]}`,
			want: `self["a"] in {"x": 1, "y": [true, null]}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := preprocessCEL(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("preprocessCEL(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestPreprocessCELRefusesWhatItCannotParse(t *testing.T) {
	tests := map[string]struct{ in, wantErr string }{
		"an unterminated string":  {in: `self == 'a`, wantErr: "unterminated"},
		"a trailing operator":     {in: `self &&`, wantErr: "unexpected"},
		"trailing tokens":         {in: `self self`, wantErr: "unexpected"},
		"oneof of one field":      {in: `oneof(self.a)`, wantErr: "at least 2"},
		"index of no field":       {in: `self.index({})`, wantErr: "index requires"},
		"an unknown character":    {in: `self # 1`, wantErr: "unexpected character"},
		"an unbalanced paren":     {in: `(self`, wantErr: `want ")"`},
		"an unknown escape":       {in: `'\q'`, wantErr: "unknown escape"},
		"a ternary without else":  {in: `a ? b`, wantErr: `want ":"`},
		"a select of a non-name":  {in: `self.1`, wantErr: "field name"},
		"index with a non-name":   {in: `self.index({}, 'a')`, wantErr: "must be names"},
		"a newline in a string":   {in: "'a\nb'", wantErr: "newline"},
		"a map without its colon": {in: `{'a' 1}`, wantErr: `want ":"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := preprocessCEL(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("preprocessCEL(%q) = %v, want an error containing %q", tc.in, err, tc.wantErr)
			}
		})
	}
}
