package status

import (
	"time"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Names of the condition the Auditor writes on a config generation cannot
// express as configuration Envoy accepts.
const (
	// RefusedConditionType is present (status True) only while the config
	// holds values gen.EnvoyRefusals names: the resources built from it
	// fail closed (gen's containment) and the rest of the mesh is served.
	RefusedConditionType = "discovery.meshplane.io/Refused"
	// ReasonBreaksEnvoyRules: some values break Envoy's rules.
	ReasonBreaksEnvoyRules = "BreaksEnvoyRules"
)

// Refused returns what of c generation cannot express (gen.EnvoyRefusals),
// "field: problem" each; nil for most configs. It is the one judgement
// behind the condition, the Auditor's log line and gauge, /debug/configz
// and the validating webhook's refusal.
func Refused(c *model.Config) []string {
	if c == nil || !c.Key.Kind.IsIstio() {
		return nil
	}
	spec := specOf(c.Object)
	if spec == nil {
		return nil
	}
	return gen.EnvoyRefusals(c.Key.Kind, spec)
}

const refusedPrefix = "discovery cannot express these values, so what is built from them fails closed (HTTP 500 for the hosts they route): "

// wantRefusedCondition is the condition c should carry for its refusals:
// nil (none) when there are none.
func wantRefusedCondition(c *model.Config, refused []string, now time.Time) *Condition {
	if len(refused) == 0 {
		return nil
	}
	return &Condition{
		Status: "True", Reason: ReasonBreaksEnvoyRules,
		Message:            refusedPrefix + listWithin(refused, maxMessage-len(refusedPrefix)),
		ObservedGeneration: generation(c.Object), Time: now,
	}
}

// RefusedConfigzNote is a monitor.ConfigNote: it adds "refused" (the
// problems) to each config of /debug/configz that generation cannot
// express, so it shows in file mode too, where no status is written.
func RefusedConfigzNote(c *model.Config) (string, any, bool) {
	r := Refused(c)
	if len(r) == 0 {
		return "", nil, false
	}
	return "refused", r, true
}
