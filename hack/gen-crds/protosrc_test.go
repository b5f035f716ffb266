package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// The example of descriptor.proto (SourceCodeInfo.Location), which
// documents which comment protoc attaches to which declaration, with a
// oneof, a map, options and nested declarations around it.
const commentsProto = `syntax = "proto3";
// Detached: a blank line follows.

package test.v1;

import "google/protobuf/duration.proto";
option go_package = "example.com/test"; // trailing

// Leading of Outer.
// +marker=1
message Outer {
  option (custom) = { a: 1 b: "}" };
  int32 foo = 1;  // Comment attached to foo.
  // Comment attached to bar.
  int32 bar = 2;

  string baz = 3;
  // Comment attached to baz.
  // Another line attached to baz.

  // Comment attached to moo.
  //
  // Another line attached to moo.
  double moo = 4;

  // Detached comment for corge. This is not leading or trailing comments
  // to moo or corge because there are blank lines separating it from
  // both.

  // Detached comment for corge paragraph 2.

  string corge = 5;
  /* Block comment attached
   * to corge.  Leading asterisks
   * will be removed. */
  /* Block comment attached to
   * grault. */
  int32 grault = 6;

  // Leading of the oneof member.
  oneof choice {
    // Leading of a.
    string a = 7 [deprecated = true];
    Inner b = 8;
  }
  // Leading of the map.
  map<string, Inner> labels = 9;
  enum Mode { // not recorded
    UNSET = 0;
  }
  reserved 10, 11;

  // Leading of Inner.
  message Inner {
    // Leading of Inner.x.
    repeated google.protobuf.Duration x = 1;
  }
  // Dangling at the end of a scope.
}
`

func TestLeadingCommentsFollowProtoc(t *testing.T) {
	c := protoComments{}
	if err := c.parse(commentsProto); err != nil {
		t.Fatal(err)
	}
	want := map[protoreflect.FullName]string{
		"test.v1.Outer":          " Leading of Outer.\n +marker=1\n",
		"test.v1.Outer.foo":      "",
		"test.v1.Outer.bar":      " Comment attached to bar.\n",
		"test.v1.Outer.baz":      "",
		"test.v1.Outer.moo":      " Comment attached to moo.\n\n Another line attached to moo.\n",
		"test.v1.Outer.corge":    "",
		"test.v1.Outer.grault":   " Block comment attached to\n grault. ",
		"test.v1.Outer.a":        " Leading of a.\n",
		"test.v1.Outer.b":        "",
		"test.v1.Outer.labels":   " Leading of the map.\n",
		"test.v1.Outer.Inner":    " Leading of Inner.\n",
		"test.v1.Outer.Inner.x":  " Leading of Inner.x.\n",
		"test.v1.Outer.Inner.y":  "(absent)",
		"test.v1.Outer.Mode":     "(absent)",
		"test.v1.Outer.UNSET":    "(absent)",
		"test.v1.Outer.choice":   "(absent)",
		"test.v1.Outer.reserved": "(absent)",
	}
	for name, w := range want {
		got, ok := c[name]
		if !ok {
			got = "(absent)"
		}
		if got != w {
			t.Errorf("%s: leading comment %q, want %q", name, got, w)
		}
	}
	if len(c) != 12 {
		t.Errorf("recorded %d declarations, want 12: %v", len(c), c)
	}
}

func TestProtoParserRefusesWhatItDoesNotUnderstand(t *testing.T) {
	tests := map[string]string{
		"a field without a number":      "package p;\nmessage M {\n  string a;\n}\n",
		"an unterminated message":       "package p;\nmessage M {\n  string a = 1;\n",
		"a field name that is a number": "package p;\nmessage M {\n  string 1a = 1;\n}\n",
		"an unbalanced brace in option": "package p;\nmessage M {\n  option (x) = { a: 1 ;\n}\n",
	}
	for name, src := range tests {
		t.Run(name, func(t *testing.T) {
			if err := (protoComments{}).parse(src); err == nil {
				t.Errorf("parsed %q without error", src)
			}
		})
	}
}

// TestEveryDeclarationTheGeneratorReadsIsFound walks every message and
// field that the CRDs are built from (the nine kinds and their status) and
// checks that the parser found its declaration in the .proto file, so that
// no annotation can be missed by a parser gap.
func TestEveryDeclarationTheGeneratorReadsIsFound(t *testing.T) {
	src := newProtoSource(testAPIDir(t))
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] || strings.HasPrefix(string(md.FullName()), "google.protobuf.") || md.IsMapEntry() {
			return
		}
		seen[md.FullName()] = true
		if _, err := src.comment(md); err != nil {
			t.Error(err)
		}
		for i := 0; i < md.Fields().Len(); i++ {
			fd := md.Fields().Get(i)
			if _, err := src.comment(fd); err != nil {
				t.Error(err)
			}
			if fd.Message() != nil {
				walk(fd.Message())
			}
			if fd.IsMap() && fd.MapValue().Message() != nil {
				walk(fd.MapValue().Message())
			}
		}
	}
	for _, name := range append(append([]protoreflect.FullName{}, messages...), defaultStatus) {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		if err != nil {
			t.Fatal(err)
		}
		walk(d.(protoreflect.MessageDescriptor))
	}
	if len(seen) < 50 {
		t.Errorf("walked %d messages; the walk is broken", len(seen))
	}
	t.Logf("%d messages and their fields found in %d .proto files", len(seen), len(src.read))
}
