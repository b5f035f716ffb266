package mesh

import (
	"encoding/json"
	"sort"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// unknownFields walks a JSON object against a message descriptor and
// returns the paths of the keys the message does not have (istiod's
// decoder drops them after its strict attempt fails). Maps and lists of
// messages are walked too; well-known types are not.
func unknownFields(js []byte, md protoreflect.MessageDescriptor, prefix string) []string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(js, &obj) != nil {
		return nil
	}
	var out []string
	for key, val := range obj {
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		fd := fieldByName(md, key)
		if fd == nil {
			out = append(out, path)
			continue
		}
		out = append(out, unknownIn(fd, val, path)...)
	}
	sort.Strings(out)
	return out
}

func unknownIn(fd protoreflect.FieldDescriptor, val json.RawMessage, path string) []string {
	switch {
	case fd.IsMap():
		vd := fd.MapValue()
		if vd.Kind() != protoreflect.MessageKind || wellKnown(vd.Message()) {
			return nil
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(val, &m) != nil {
			return nil
		}
		var out []string
		for k, v := range m {
			out = append(out, unknownFields(v, vd.Message(), path+"["+k+"]")...)
		}
		return out
	case fd.Kind() != protoreflect.MessageKind || wellKnown(fd.Message()):
		return nil
	case fd.IsList():
		var l []json.RawMessage
		if json.Unmarshal(val, &l) != nil {
			return nil
		}
		var out []string
		for i, v := range l {
			out = append(out, unknownFields(v, fd.Message(), path+"["+itoa(i)+"]")...)
		}
		return out
	}
	return unknownFields(val, fd.Message(), path)
}

func wellKnown(md protoreflect.MessageDescriptor) bool {
	return md.FullName().Parent() == "google.protobuf"
}

func unknownIgnored(paths []string) []Field {
	out := make([]Field, 0, len(paths))
	for _, p := range paths {
		out = append(out, Field{Path: p, Reason: "not a MeshConfig field (istiod drops it too)", Unknown: true})
	}
	return out
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
