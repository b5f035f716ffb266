package status

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/meshplane/discovery/pkg/model"
)

// Names of the condition the Auditor writes on an EnvoyFilter whose patch
// generation refused.
const (
	// PatchRefusedConditionType is present (status True) on an
	// EnvoyFilter while generation has refused one of its patches at its
	// current generation: the resource the patch made broke Envoy's rules
	// (or a patch added a resource under a name the proxy has already), so
	// it was not sent (gen keeps the last good patched form, or sends the
	// resource unpatched), and everything else was served as usual. It goes when the EnvoyFilter changes (a new
	// generation that generation has not refused) or is deleted.
	PatchRefusedConditionType = "discovery.meshplane.io/PatchRefused"
	// ReasonPatchedResourceInvalid is its reason.
	ReasonPatchedResourceInvalid = "PatchedResourceInvalid"
)

// PatchRefusals says what generation refused of EnvoyFilters at run time
// (gen.Generator implements it).
type PatchRefusals interface {
	// EnvoyFilterRefused returns a refusal of a patch of the EnvoyFilter
	// at that generation (with generation 0, at that resourceVersion).
	EnvoyFilterRefused(namespace, name string, generation int64, resourceVersion string) (string, bool)
}

// SetPatchRefusals makes the Auditor report what p refused of each
// EnvoyFilter as the PatchRefusedConditionType condition. Call it before
// Start, and have p's generation call NotePatchRefused.
func (a *Auditor) SetPatchRefusals(p PatchRefusals) { a.patches = p }

// NotePatchRefused asks for the EnvoyFilter namespace/name to be judged
// again: generation refused one of its patches. It never blocks (it is
// called from generation).
func (a *Auditor) NotePatchRefused(namespace, name string) {
	a.mu.Lock()
	a.pending[model.Key{Kind: model.KindEnvoyFilter, Namespace: namespace, Name: name}] = true
	a.mu.Unlock()
	a.signal()
}

const patchRefusedPrefix = "a patch of this EnvoyFilter made a resource Envoy refuses; it is not sent (the proxies keep the last good patched form, or get the resource unpatched) and nothing else is affected: "

// wantPatchRefused is the PatchRefusedConditionType condition c should
// carry: nil for everything but an EnvoyFilter generation refused a patch
// of at its current version.
func (a *Auditor) wantPatchRefused(c *model.Config, now time.Time) *Condition {
	if a.patches == nil || c.Key.Kind != model.KindEnvoyFilter {
		return nil
	}
	acc, err := meta.Accessor(c.Object)
	if err != nil {
		return nil
	}
	msg, ok := a.patches.EnvoyFilterRefused(c.Key.Namespace, c.Key.Name, acc.GetGeneration(), acc.GetResourceVersion())
	if !ok {
		return nil
	}
	return &Condition{
		Status: "True", Reason: ReasonPatchedResourceInvalid,
		Message:            truncate(patchRefusedPrefix + msg),
		ObservedGeneration: acc.GetGeneration(), Time: now,
	}
}
