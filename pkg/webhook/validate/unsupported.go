package validate

import (
	"google.golang.org/protobuf/proto"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// unsupported lists the fields of spec that Istio accepts but discovery
// does not act on yet, as AdmissionReview warnings. The xDS generator's own
// lists of the fields it acts on decide (gen.UnsupportedFields), so the
// warnings cannot drift from what the proxies get. A kind generation
// does not read (gen.ReadsKind) is reported whole, with what discovery
// does instead (gen.UnreadKindNote).
func unsupported(kind string, spec proto.Message) []string {
	var w []string
	warn := func(cond bool, field, what string) {
		if cond {
			w = append(w, kind+" "+field+": "+what+" is not supported by discovery yet and has no effect")
		}
	}
	for _, f := range gen.UnsupportedFields(model.Kind(kind), spec) {
		warn(true, "spec."+f, "this field")
	}
	if k := model.Kind(kind); k.IsIstio() && !gen.ReadsKind(k) {
		msg := kind + ": this kind is not supported by discovery yet and has no effect"
		if note := gen.UnreadKindNote(k); note != "" {
			msg = kind + ": this kind is not supported by discovery yet: " + note
		}
		w = append(w, msg)
	}
	return dedupe(w)
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	out := in[:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
