package status

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Names of the condition the Auditor writes.
const (
	// UnsupportedConditionType is the type of the condition in
	// status.conditions of an Istio resource that sets something discovery
	// ignores. It is present (status True) only while it does.
	UnsupportedConditionType = "discovery.meshplane.io/UnsupportedFields"
	// ReasonFieldsNotSupported: some spec fields have no effect.
	ReasonFieldsNotSupported = "FieldsNotSupported"
	// ReasonKindNotSupported: discovery does not read the kind at all.
	ReasonKindNotSupported = "KindNotSupported"
)

// Finding is what discovery ignores of one Istio config.
type Finding struct {
	// Kind is true when discovery does not read the config's kind at all.
	Kind bool `json:"kind,omitempty"`
	// Fields are the spec fields that are set and have no effect, list
	// indexes written as "[]" ("spec.http[].mirror").
	Fields []string `json:"fields,omitempty"`
}

// Empty reports whether everything the config sets is acted on.
func (f Finding) Empty() bool { return !f.Kind && len(f.Fields) == 0 }

// Message says what f means to a user, in at most maxMessage bytes.
func (f Finding) Message(kind model.Kind) string {
	if f.Kind {
		if note := gen.UnreadKindNote(kind); note != "" {
			return truncate(fmt.Sprintf("%s is not supported by discovery: %s", kind, note))
		}
		return fmt.Sprintf("%s is not supported by discovery: it has no effect", kind)
	}
	prefix := "not supported by discovery yet, these fields have no effect: "
	return prefix + listWithin(f.Fields, maxMessage-len(prefix))
}

// listWithin joins items with ", " in at most max bytes, ending with
// "and N more" when they do not all fit.
func listWithin(items []string, max int) string {
	out := strings.Join(items, ", ")
	if len(out) <= max {
		return out
	}
	for n := len(items) - 1; n > 0; n-- {
		more := fmt.Sprintf(", and %d more", len(items)-n)
		if s := strings.Join(items[:n], ", ") + more; len(s) <= max {
			return s
		}
	}
	return truncate(out)
}

// Unsupported returns what discovery ignores of c: its whole kind, or the
// spec fields the xDS generator's tables (gen.UnsupportedFields) say it
// does not act on. It is the one judgement behind the status condition,
// the Auditor's log line and metric, and /debug/configz.
func Unsupported(c *model.Config) Finding {
	if c == nil || !c.Key.Kind.IsIstio() {
		return Finding{}
	}
	if !gen.ReadsKind(c.Key.Kind) {
		return Finding{Kind: true}
	}
	spec := specOf(c.Object)
	if spec == nil {
		return Finding{}
	}
	fields := gen.UnsupportedFields(c.Key.Kind, spec)
	if len(fields) == 0 {
		return Finding{}
	}
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = "spec." + f
	}
	sort.Strings(out)
	return Finding{Fields: out}
}

// specOf returns the Spec of an istio.io/client-go object (a struct
// field holding the istio.io/api message), or nil.
func specOf(obj runtime.Object) proto.Message {
	f := field(obj, "Spec")
	if f == nil {
		return nil
	}
	m, _ := f.(proto.Message)
	return m
}

// conditionsOf returns status.conditions of an istio.io/client-go object.
// Every Istio kind's Status (IstioStatus, ServiceEntryStatus) has them.
func conditionsOf(obj runtime.Object) []*metav1alpha1.IstioCondition {
	s, ok := field(obj, "Status").(interface {
		GetConditions() []*metav1alpha1.IstioCondition
	})
	if !ok {
		return nil
	}
	return s.GetConditions()
}

// field returns a pointer to the struct field name of *obj, or nil.
func field(obj runtime.Object, name string) any {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName(name)
	if !f.IsValid() || !f.CanAddr() {
		return nil
	}
	return f.Addr().Interface()
}

// generation is the object's metadata.generation (0 in file mode).
func generation(obj runtime.Object) int64 {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	return acc.GetGeneration()
}

// version names one version of a config's spec: its generation, or in file
// mode (no generations) its resourceVersion. Status writes leave it alone.
func version(c *model.Config) string {
	if g := generation(c.Object); g > 0 {
		return fmt.Sprint("g", g)
	}
	if acc, err := meta.Accessor(c.Object); err == nil {
		return "rv" + acc.GetResourceVersion()
	}
	return ""
}

// wantCondition is the condition c should carry for f: nil (none) when
// nothing is ignored.
func wantCondition(c *model.Config, f Finding, now time.Time) *Condition {
	if f.Empty() {
		return nil
	}
	reason := ReasonFieldsNotSupported
	if f.Kind {
		reason = ReasonKindNotSupported
	}
	return &Condition{
		Status: "True", Reason: reason, Message: f.Message(c.Key.Kind),
		ObservedGeneration: generation(c.Object), Time: now,
	}
}

// inSync reports whether the conditions of type typ in conds say what want
// says (want nil: there is none).
func inSync(conds []*metav1alpha1.IstioCondition, typ string, want *Condition) bool {
	var found []*metav1alpha1.IstioCondition
	for _, c := range conds {
		if c.GetType() == typ {
			found = append(found, c)
		}
	}
	if want == nil {
		return len(found) == 0
	}
	if len(found) != 1 {
		return false
	}
	c := found[0]
	return c.GetStatus() == want.Status && c.GetReason() == want.Reason && c.GetMessage() == want.Message &&
		c.GetObservedGeneration() == want.ObservedGeneration
}

// configzEntry is what /debug/configz shows of a Finding.
type configzEntry struct {
	Finding
	Message string `json:"message"`
}

// ConfigzNote is a monitor.ConfigNote: it adds "unsupported" (kind,
// fields and the condition's message) to each config of /debug/configz
// that sets something discovery ignores, so it shows in file mode too,
// where no status is written.
func ConfigzNote(c *model.Config) (string, any, bool) {
	f := Unsupported(c)
	if f.Empty() {
		return "", nil, false
	}
	return "unsupported", configzEntry{Finding: f, Message: f.Message(c.Key.Kind)}, true
}
