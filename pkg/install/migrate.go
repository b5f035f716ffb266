package install

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A migration from Istio is revision based, as Istio's own canary
// upgrades are: bootstrap --take-over installs discovery as a revision of
// its own beside istiod (never touching istiod's Service, webhooks,
// ConfigMaps or CRDs); namespaces move to it by label, and their pods on
// their next restart; istiod is removed last, by the user, with the tool
// that installed it. Migration reports where that stands.

// Namespace labels that select an injector.
const (
	labelRev            = "istio.io/rev"
	labelIstioInjection = "istio-injection"
	labelTag            = "istio.io/tag"
)

// Migration is where a migration from Istio to Revision stands.
type Migration struct {
	Revision string
	Istio    *IstioInstall
	// Pending are the namespaces that still select Istio's injector
	// (istio-injection=enabled, or istio.io/rev naming one of Istio's
	// revisions or tags), with that label; Moved those labelled for
	// Revision.
	Pending map[string]string
	Moved   []string
	// IstioPods counts, by namespace, the pods that Istio's control
	// plane still serves (their istio.io/rev is one of istiod's).
	IstioPods map[string]int
}

// Done reports whether nothing uses Istio's control plane any more.
func (m *Migration) Done() bool { return len(m.Pending) == 0 && len(m.IstioPods) == 0 }

// Migration reads the state of a migration to revision rev.
func (c *Client) Migration(ctx context.Context, rev string) (*Migration, error) {
	rev = RevisionName(rev)
	istio, err := c.DetectIstio(ctx)
	if err != nil {
		return nil, err
	}
	out := &Migration{Revision: rev, Istio: istio, Pending: map[string]string{}, IstioPods: map[string]int{}}
	istioRevs := map[string]bool{}
	for _, r := range istio.Revisions {
		istioRevs[r] = true
	}
	selectsIstio, err := c.istioSelectors(ctx, istioRevs)
	if err != nil {
		return nil, err
	}
	nss, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	for _, ns := range nss.Items {
		l := ns.Labels
		switch {
		case l[labelRev] == rev:
			out.Moved = append(out.Moved, ns.Name)
		case l[labelIstioInjection] == "enabled" && istio.ControlPlane:
			out.Pending[ns.Name] = labelIstioInjection + "=enabled"
		case l[labelRev] != "" && selectsIstio[l[labelRev]]:
			out.Pending[ns.Name] = labelRev + "=" + l[labelRev]
		}
	}
	if len(istio.Revisions) > 0 {
		pods, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{
			LabelSelector: labelRev + " in (" + strings.Join(istio.Revisions, ",") + ")",
		})
		if err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		for _, p := range pods.Items {
			if p.Labels["app"] != "istiod" {
				out.IstioPods[p.Namespace]++
			}
		}
	}
	return out, nil
}

// istioSelectors are the istio.io/rev values that select Istio's
// injector: its revisions, and the revision tags that point at them.
func (c *Client) istioSelectors(ctx context.Context, revs map[string]bool) (map[string]bool, error) {
	out := map[string]bool{}
	for r := range revs {
		out[r] = true
	}
	tags, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: labelTag})
	if err != nil {
		return nil, fmt.Errorf("list revision tags: %w", err)
	}
	for _, t := range tags.Items {
		if revs[RevisionName(t.Labels[labelRev])] {
			out[t.Labels[labelTag]] = true
		}
	}
	return out, nil
}

// MoveNamespaces labels each namespace for revision rev (istio.io/rev=rev,
// without istio-injection), as a user moving it would: its pods are
// injected by rev from their next restart. Only the two injection labels
// change.
func (c *Client) MoveNamespaces(ctx context.Context, rev string, names []string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{
		labelIstioInjection: nil, labelRev: RevisionName(rev),
	}}})
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := c.Kube.CoreV1().Namespaces().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("label namespace %s: %w", n, err)
		}
	}
	return nil
}

// WriteSteps prints where the migration stands and the commands of the
// next step: move the pending namespaces and restart their workloads;
// once nothing uses Istio, remove istiod with Istio's tools.
func (m *Migration) WriteSteps(w io.Writer) {
	fmt.Fprintf(w, "Migration from Istio to revision %s: %d namespaces moved, %d still select Istio's injector.\n", m.Revision, len(m.Moved), len(m.Pending))
	pending := sortedKeys(m.Pending)
	if len(pending) > 0 {
		fmt.Fprintf(w, "Move them (or: discovery migrate --revision %s --namespaces %s), then restart their workloads:\n", m.Revision, strings.Join(pending, ","))
		for _, ns := range pending {
			fmt.Fprintf(w, "  kubectl label namespace %s istio-injection- istio.io/rev=%s --overwrite   # now %s\n", ns, m.Revision, m.Pending[ns])
		}
	}
	podNS := sortedKeys(m.IstioPods)
	if len(podNS) > 0 {
		var parts []string
		for _, ns := range podNS {
			parts = append(parts, fmt.Sprintf("%s (%d)", ns, m.IstioPods[ns]))
		}
		fmt.Fprintf(w, "Pods still served by istiod: %s. Restart them once their namespace is moved:\n", strings.Join(parts, ", "))
		for _, ns := range podNS {
			fmt.Fprintf(w, "  kubectl -n %s rollout restart deployment,statefulset,daemonset\n", ns)
		}
		fmt.Fprintf(w, "Istio's own gateways are Istio's: install a gateway of revision %s beside them (discovery bootstrap --revision %s --profile empty --set components.ingressGateways[0].name=...) and move traffic to it.\n", m.Revision, m.Revision)
	}
	if !m.Done() || !m.Istio.ControlPlane {
		return
	}
	fmt.Fprintln(w, "Nothing uses Istio's control plane any more. Last, when you choose to, remove it with the tool that installed it (discovery does not remove what it did not make):")
	cmds := append([]string(nil), m.Istio.Remove...)
	sort.Strings(cmds)
	for _, cmd := range cmds {
		fmt.Fprintf(w, "  %s\n", cmd)
	}
	fmt.Fprintf(w, "Istio's CRDs stay, and your configuration with them. Then make revision %s the default: discovery tag set default --revision %s\n", m.Revision, m.Revision)
}
