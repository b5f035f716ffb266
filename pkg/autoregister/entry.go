package autoregister

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	metav1alpha1 "istio.io/api/meta/v1alpha1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/model"
)

// Annotations istiod writes on the WorkloadEntries it manages (istio.io/api
// annotation package names).
const (
	// AnnotationGroup names the WorkloadGroup an entry was made from; its
	// presence marks the entry auto-registered.
	AnnotationGroup = "istio.io/autoRegistrationGroup"
	// AnnotationController names the replica whose stream the proxy holds.
	AnnotationController = "istio.io/workloadController"
	// AnnotationConnectedAt is when that stream opened (RFC 3339, ns).
	AnnotationConnectedAt = "istio.io/connectedAt"
	// AnnotationDisconnectedAt is when the proxy's last stream ended.
	AnnotationDisconnectedAt = "istio.io/disconnectedAt"
	// AnnotationHealthChecks marks an entry whose proxy probes the
	// workload: without a Healthy=True condition it is not ready.
	AnnotationHealthChecks = "proxy.istio.io/health-checks-enabled"
	// ConditionHealthy is the status condition the health reports set.
	ConditionHealthy = "Healthy"
	// localityLabel is the label istiod's ADS turns the node's locality
	// into; "/" is not allowed in a label value, and the entry's locality
	// field says it.
	localityLabel = "istio-locality"
	timeFormat    = time.RFC3339Nano
	maxNameLength = 253
)

// ErrIdentity is wrapped by the errors of a proxy that may not control
// the entry it asks for.
var ErrIdentity = errors.New("identity does not match the WorkloadEntry")

// EntryName is the WorkloadEntry name of a proxy that asks to be
// registered: <group>-<first IP, ':' as '-'>[-<network>], cut from the
// front to 253 characters, as istiod names it. It is "" for a proxy that
// does not ask.
func EntryName(p *model.Proxy) string {
	group := p.Metadata.AutoRegisterGroup
	if group == "" || len(p.IPs) == 0 {
		return ""
	}
	parts := []string{group, strings.ReplaceAll(p.IPs[0], ":", "-")}
	if p.Metadata.Network != "" {
		parts = append(parts, p.Metadata.Network)
	}
	name := strings.Join(parts, "-")
	if len(name) > maxNameLength {
		name = name[len(name)-maxNameLength:]
	}
	return name
}

// EntryFromGroup builds the WorkloadEntry name for proxy p from its
// WorkloadGroup, as istiod does: the group's template, its address the
// proxy's first IP, labels merged template < group metadata < the node's
// LABELS (without istio-locality), annotations the group's metadata's
// plus istio.io/autoRegistrationGroup, the node's network and locality,
// health checks on when the node's PROXY_CONFIG has a readinessProbe,
// and the group as its controlling owner (so deleting the group lets the
// garbage collector delete it). Connection annotations are not set here.
func EntryFromGroup(name string, p *model.Proxy, group *networkingv1.WorkloadGroup) *networkingv1.WorkloadEntry {
	we := &networkingv1.WorkloadEntry{}
	if t := group.Spec.GetTemplate(); t != nil {
		proto.Merge(&we.Spec, t)
	}
	we.Spec.Address = p.IPs[0]
	labels := merge(we.Spec.GetLabels(), group.Spec.GetMetadata().GetLabels(), p.Metadata.Labels)
	delete(labels, localityLabel)
	we.Spec.Labels = labels
	annotations := merge(group.Spec.GetMetadata().GetAnnotations(), map[string]string{AnnotationGroup: group.Name})
	if p.Metadata.Network != "" {
		we.Spec.Network = p.Metadata.Network
	}
	if l := p.NodeLocality; l != (model.Locality{}) {
		we.Spec.Locality = localityString(l)
	}
	if p.Metadata.ReadinessProbe {
		annotations[AnnotationHealthChecks] = "true"
	}
	gvk := model.KindWorkloadGroup.GroupVersionKind()
	controller := true
	we.ObjectMeta = metav1.ObjectMeta{
		Name: name, Namespace: p.Namespace, Labels: copyMap(labels), Annotations: annotations,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: group.Name, UID: group.UID, Controller: &controller,
		}},
	}
	return we
}

func localityString(l model.Locality) string {
	switch {
	case l.Subzone != "":
		return l.Region + "/" + l.Zone + "/" + l.Subzone
	case l.Zone != "":
		return l.Region + "/" + l.Zone
	}
	return l.Region
}

// merge returns the union of ms; later maps win. Never nil.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func copyMap(m map[string]string) map[string]string { return merge(m) }

// CheckIdentity reports whether the stream's verified caller may control
// an entry of namespace ns that runs as serviceAccount ("" for any), as
// istiod's ensureProxyCanControlEntry: a stream without a verified
// identity (the plaintext port) may control none. istiod can turn the
// check off (ISTIO_WORKLOAD_ENTRY_VALIDATE_IDENTITY); here it cannot: a
// registration is a write to the API server on an unknown caller's word.
func CheckIdentity(caller *ca.Identity, ns, serviceAccount string) error {
	switch {
	case caller == nil:
		return fmt.Errorf("%w: registration needs a verified identity (connect to the TLS port with a certificate or token)", ErrIdentity)
	case caller.Namespace != ns:
		return fmt.Errorf("%w: the caller's namespace %q is not the entry's %q", ErrIdentity, caller.Namespace, ns)
	case serviceAccount != "" && caller.ServiceAccount != serviceAccount:
		return fmt.Errorf("%w: the caller's service account %q is not the entry's %q", ErrIdentity, caller.ServiceAccount, serviceAccount)
	}
	return nil
}

// setConnected marks we connected to replica at t (istiod's
// setConnectMeta).
func setConnected(we *networkingv1.WorkloadEntry, replica string, t time.Time) {
	if we.Annotations == nil {
		we.Annotations = map[string]string{}
	}
	we.Annotations[AnnotationController] = replica
	we.Annotations[AnnotationConnectedAt] = t.UTC().Format(timeFormat)
	delete(we.Annotations, AnnotationDisconnectedAt)
}

// annotationTime reads a time annotation; zero when absent or malformed.
func annotationTime(we *networkingv1.WorkloadEntry, key string) time.Time {
	t, err := time.Parse(timeFormat, we.Annotations[key])
	if err != nil {
		return time.Time{}
	}
	return t
}

// connectVerdict says what a stream opened at connectedAt on replica does
// to the entry we, as istiod's changeWorkloadEntryStateToConnected: write
// (true) unless a later disconnect or a later connection (to any replica)
// is recorded, or the entry already says this.
func connectVerdict(we *networkingv1.WorkloadEntry, replica string, connectedAt time.Time) (write bool, why string) {
	if d := annotationTime(we, AnnotationDisconnectedAt); !d.IsZero() && connectedAt.Before(d) {
		return false, "a later disconnect is recorded"
	}
	last := annotationTime(we, AnnotationConnectedAt)
	if connectedAt.Before(last) {
		return false, "the proxy connected to " + we.Annotations[AnnotationController] + " later"
	}
	if we.Annotations[AnnotationController] == replica && !connectedAt.After(last) {
		return false, "already recorded"
	}
	return true, ""
}

// disconnectVerdict says whether replica, whose last stream for the entry
// opened at connectedAt and ended at at, marks we disconnected, as
// istiod's changeWorkloadEntryStateToDisconnected: only when no later
// connection is recorded and the entry is still this replica's.
func disconnectVerdict(we *networkingv1.WorkloadEntry, replica string, connectedAt, at time.Time) bool {
	recorded := annotationTime(we, AnnotationConnectedAt)
	if recorded.After(connectedAt) {
		return false
	}
	if we.Annotations[AnnotationController] != replica {
		return false
	}
	return !at.Before(recorded)
}

// ShouldCleanup reports whether an auto-registered entry is due for
// deletion at now, as istiod's shouldCleanupEntry: disconnected for at
// least grace, or marked connected for longer than maxAge (a replica died
// before it could mark the disconnect; maxAge 0 means never).
//
// An entry that was not auto-registered is never deleted: it is due for
// losing its Healthy condition under the same rules, when a replica
// controlled it (istiod's health-checked entries).
func ShouldCleanup(we *networkingv1.WorkloadEntry, now time.Time, grace, maxAge time.Duration) bool {
	auto := we.Annotations[AnnotationGroup] != ""
	if !auto && (we.Annotations[AnnotationController] == "" || !hasCondition(we, ConditionHealthy)) {
		return false
	}
	if _, ok := we.Annotations[AnnotationConnectedAt]; ok {
		c := annotationTime(we, AnnotationConnectedAt)
		return maxAge > 0 && !c.IsZero() && now.Sub(c) > maxAge
	}
	raw, ok := we.Annotations[AnnotationDisconnectedAt]
	if !ok || raw == "" {
		return false
	}
	d := annotationTime(we, AnnotationDisconnectedAt)
	// A malformed time cannot say the grace period runs: clean up, as
	// istiod does.
	return d.IsZero() || now.Sub(d) >= grace
}

// healthCondition is the Healthy condition of a report received at at.
// The agent reports transitions only, so probe and transition time are
// the same (as istiod sets them).
func healthCondition(healthy bool, message string, at time.Time) *metav1alpha1.IstioCondition {
	c := &metav1alpha1.IstioCondition{
		Type: ConditionHealthy, Status: "True",
		LastProbeTime: timestamppb.New(at), LastTransitionTime: timestamppb.New(at),
	}
	if !healthy {
		c.Status, c.Message = "False", message
	}
	return c
}

// setCondition replaces or adds cond in we's status; it reports false
// (and changes nothing) when the entry holds a newer probe of that type.
func setCondition(we *networkingv1.WorkloadEntry, cond *metav1alpha1.IstioCondition) bool {
	for i, c := range we.Status.Conditions {
		if c.GetType() != cond.GetType() {
			continue
		}
		if c.GetLastProbeTime().AsTime().After(cond.GetLastProbeTime().AsTime()) {
			return false
		}
		we.Status.Conditions[i] = cond
		return true
	}
	we.Status.Conditions = append(we.Status.Conditions, cond)
	return true
}

func hasCondition(we *networkingv1.WorkloadEntry, t string) bool {
	for _, c := range we.Status.Conditions {
		if c.GetType() == t {
			return true
		}
	}
	return false
}
