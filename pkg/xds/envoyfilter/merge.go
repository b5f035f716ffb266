package envoyfilter

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
)

// Merge merges src into dst as istiod's pkg/proto/merge.Merge: like
// proto.Merge (scalars replaced, messages merged, lists appended, map
// entries replaced) except that a Duration is replaced whole; with
// replaceLists (MERGE_AND_REPLACE_LIST), a list src sets replaces dst's.
// An Any is merged as a message: its bytes are replaced, not merged; the
// filter patches merge typed configs with MergeAny instead.
func Merge(dst, src proto.Message, replaceLists bool) {
	d, s := dst.ProtoReflect(), src.ProtoReflect()
	if d.Descriptor().FullName() != s.Descriptor().FullName() {
		panic(fmt.Sprintf("envoyfilter: merge of %s into %s", s.Descriptor().FullName(), d.Descriptor().FullName()))
	}
	mergeMessage(d, s, replaceLists)
}

var durationName = (&durationpb.Duration{}).ProtoReflect().Descriptor().FullName()

func mergeMessage(dst, src protoreflect.Message, replaceLists bool) {
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := dst.Mutable(fd).List()
			if replaceLists {
				l.Truncate(0)
			}
			sl := v.List()
			for i := 0; i < sl.Len(); i++ {
				l.Append(copyValue(fd, l.NewElement, sl.Get(i), replaceLists))
			}
		case fd.IsMap():
			m := dst.Mutable(fd).Map()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				m.Set(k, copyValue(fd.MapValue(), m.NewValue, mv, replaceLists))
				return true
			})
		case fd.Message() != nil:
			if fd.Message().FullName() == durationName {
				dst.Set(fd, protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect()))
				return true
			}
			mergeMessage(dst.Mutable(fd).Message(), v.Message(), replaceLists)
		case fd.Kind() == protoreflect.BytesKind:
			dst.Set(fd, protoreflect.ValueOfBytes(append([]byte{}, v.Bytes()...)))
		default:
			dst.Set(fd, v)
		}
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(append(dst.GetUnknown(), u...))
	}
}

// copyValue is a copy of v for a list element or map value of fd.
func copyValue(fd protoreflect.FieldDescriptor, newValue func() protoreflect.Value, v protoreflect.Value, replaceLists bool) protoreflect.Value {
	switch {
	case fd.Message() != nil:
		nv := newValue()
		mergeMessage(nv.Message(), v.Message(), replaceLists)
		return nv
	case fd.Kind() == protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(append([]byte{}, v.Bytes()...))
	}
	return v
}

// MergeAny is istiod's util.MergeAnyWithAny: both Anys decoded, src
// merged into dst, the result encoded again. An Any of a type this binary
// does not know, or of two different types, is an error (istiod then
// keeps dst).
func MergeAny(dst, src *anypb.Any) (*anypb.Any, error) {
	d, err := dst.UnmarshalNew()
	if err != nil {
		return nil, err
	}
	s, err := src.UnmarshalNew()
	if err != nil {
		return nil, err
	}
	if d.ProtoReflect().Descriptor().FullName() != s.ProtoReflect().Descriptor().FullName() {
		// istiod's merge panics here and its recover drops every patch
		// of the resource type; here only this merge is refused.
		return nil, fmt.Errorf("typed_config %s cannot merge into %s", src.GetTypeUrl(), dst.GetTypeUrl())
	}
	Merge(d, s, false)
	return toAny(d)
}

// toAny encodes m deterministically, so that the same patch gives the
// same bytes (and resource hash) every generation.
func toAny(m proto.Message) (*anypb.Any, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName()), Value: b}, nil
}

// mergeValue applies a MERGE or MERGE_AND_REPLACE_LIST patch.
func mergeValue(op networking.EnvoyFilter_Patch_Operation, dst, src proto.Message) {
	Merge(dst, src, op == networking.EnvoyFilter_Patch_MERGE_AND_REPLACE_LIST)
}

func isMerge(op networking.EnvoyFilter_Patch_Operation) bool {
	return op == networking.EnvoyFilter_Patch_MERGE || op == networking.EnvoyFilter_Patch_MERGE_AND_REPLACE_LIST
}

// insertAt inserts v at i.
func insertAt[E any](s []E, i int, v E) []E {
	var zero E
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

// index is the first element of s that match accepts, or -1.
func index[E any](s []E, match func(E) bool) int {
	for i, e := range s {
		if match(e) {
			return i
		}
	}
	return -1
}
