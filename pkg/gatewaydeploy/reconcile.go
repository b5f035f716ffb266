package gatewaydeploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	gw "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshplane/discovery/pkg/status"
)

// revisionLabel names the control plane revision of a Gateway. Chosen
// differently from istiod: revision tags are not followed.
const revisionLabel = "istio.io/rev"

// reconcile brings the objects of the Gateway key in step with it.
func (c *Controller) reconcile(ctx context.Context, key types.NamespacedName) error {
	g, err := c.gateways.Gateways(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.setInfra(key, nil)
		return c.cleanup(ctx, key)
	}
	if err != nil {
		return err
	}
	if !c.ours(string(g.Spec.GatewayClassName)) || !Managed(&g.Spec) || !ManagedByUs(g) || g.Labels[revisionLabel] != c.opts.Revision {
		// As istiod: what was made for it before stays until the Gateway
		// is deleted (the garbage collector's owner references).
		c.setInfra(key, nil)
		return nil
	}
	objs, err := c.render(ctx, g)
	var transient errTransient
	switch {
	case errors.As(err, &transient):
		return err
	case err != nil:
		// The Gateway's own mistake: retrying does not help, its next
		// change is seen.
		c.log.Warn("cannot deploy a Gateway", "gateway", key.String(), "error", err)
		c.setInfra(key, &status.GatewayInfra{Programmed: metav1.Condition{
			Status: metav1.ConditionFalse, Reason: string(gw.GatewayReasonInvalid), Message: err.Error(),
		}})
		return nil
	}
	var refused []string
	for _, o := range []runtime.Object{objs.ServiceAccount, objs.Deployment, objs.Service} {
		ok, err := c.apply(ctx, o)
		if err != nil {
			return err
		}
		if !ok {
			m := o.(metav1.Object)
			refused = append(refused, fmt.Sprintf("%s %s", o.GetObjectKind().GroupVersionKind().Kind, m.GetName()))
		}
	}
	inf := c.infraOf(g, objs)
	if len(refused) > 0 {
		inf.Programmed = metav1.Condition{
			Status: metav1.ConditionFalse, Reason: string(gw.GatewayReasonInvalid),
			Message: fmt.Sprintf("%s exist without label %s=%s: not taken over", strings.Join(refused, ", "), ManagedLabel, ManagedValue),
		}
	}
	c.setInfra(key, &inf)
	return nil
}

// render renders g's objects with its class's defaults and parameters.
func (c *Controller) render(ctx context.Context, g *gw.Gateway) (*Objects, error) {
	params, err := c.parameters(ctx, g)
	if err != nil {
		return nil, err
	}
	return Render(Input{Gateway: g, DefaultServiceType: corev1.ServiceTypeLoadBalancer, Parameters: params, Pods: c.pods})
}

// apply server-side applies obj (forcing ownership of its fields, as
// istiod does). An object of that name that exists without the managed
// label is someone else's: it is left alone and ok is false, as istiod's
// canManage.
func (c *Controller) apply(ctx context.Context, obj runtime.Object) (ok bool, err error) {
	m := obj.(metav1.Object)
	ns, name := m.GetNamespace(), m.GetName()
	var managed bool
	var getErr error
	switch obj.(type) {
	case *corev1.ServiceAccount:
		_, getErr = c.accounts.ServiceAccounts(ns).Get(name)
	case *appsv1.Deployment:
		_, getErr = c.deployments.Deployments(ns).Get(name)
	case *corev1.Service:
		_, getErr = c.services.Services(ns).Get(name)
	}
	managed = getErr == nil // the listers hold only managed objects
	if !managed {
		if exists, err := c.exists(ctx, obj); err != nil {
			return false, errTransient{err}
		} else if exists {
			return false, nil
		}
	}
	u, err := Unstructured(obj)
	if err != nil {
		return false, err
	}
	body, err := json.Marshal(u.Object)
	if err != nil {
		return false, err
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr(true)}
	switch obj.(type) {
	case *corev1.ServiceAccount:
		_, err = c.kube.CoreV1().ServiceAccounts(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	case *appsv1.Deployment:
		_, err = c.kube.AppsV1().Deployments(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	case *corev1.Service:
		_, err = c.kube.CoreV1().Services(ns).Patch(ctx, name, types.ApplyPatchType, body, opts)
	}
	if err != nil {
		return false, fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), ns, name, err)
	}
	return true, nil
}

// exists asks the API server whether an object of obj's kind and name
// exists (the listers see only managed ones).
func (c *Controller) exists(ctx context.Context, obj runtime.Object) (bool, error) {
	m := obj.(metav1.Object)
	ns, name := m.GetNamespace(), m.GetName()
	var err error
	switch obj.(type) {
	case *corev1.ServiceAccount:
		_, err = c.kube.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
	case *appsv1.Deployment:
		_, err = c.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	case *corev1.Service:
		_, err = c.kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// cleanup deletes what was made for the Gateway key once it is gone. The
// garbage collector does it too (the owner references); discovery does
// not wait for it, as a cluster without one (or a slow one) would leave a
// gateway serving for a Gateway that no longer exists. Only managed
// objects owned by a Gateway of that name are deleted, and only when the
// API server confirms the Gateway is gone.
func (c *Controller) cleanup(ctx context.Context, key types.NamespacedName) error {
	sel := labels.SelectorFromSet(labels.Set{GatewayNameLabel: key.Name})
	deps, _ := c.deployments.Deployments(key.Namespace).List(sel)
	svcs, _ := c.services.Services(key.Namespace).List(sel)
	sas, _ := c.accounts.ServiceAccounts(key.Namespace).List(sel)
	if len(deps)+len(svcs)+len(sas) == 0 {
		return nil
	}
	if _, err := c.gwc.GatewayV1().Gateways(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{}); err == nil {
		return nil // recreated: its own events follow
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	del := func(kind, name string, refs []metav1.OwnerReference, fn func() error) error {
		if !ownedBy(refs, key.Name) {
			return nil
		}
		if err := fn(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s/%s: %w", kind, key.Namespace, name, err)
		}
		c.log.Info("deleted an object of a deleted Gateway", "gateway", key.String(), "kind", kind, "name", name)
		return nil
	}
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	for _, d := range deps {
		if err := del("Deployment", d.Name, d.OwnerReferences, func() error {
			return c.kube.AppsV1().Deployments(key.Namespace).Delete(ctx, d.Name, opts)
		}); err != nil {
			return err
		}
	}
	for _, s := range svcs {
		if err := del("Service", s.Name, s.OwnerReferences, func() error {
			return c.kube.CoreV1().Services(key.Namespace).Delete(ctx, s.Name, opts)
		}); err != nil {
			return err
		}
	}
	for _, s := range sas {
		if err := del("ServiceAccount", s.Name, s.OwnerReferences, func() error {
			return c.kube.CoreV1().ServiceAccounts(key.Namespace).Delete(ctx, s.Name, opts)
		}); err != nil {
			return err
		}
	}
	return nil
}

func ownedBy(refs []metav1.OwnerReference, gateway string) bool {
	for _, r := range refs {
		if r.APIVersion == gw.GroupVersion.String() && r.Kind == "Gateway" && r.Name == gateway {
			return true
		}
	}
	return false
}

// infraOf is what g's Service and Deployment say, as istiod's status
// says it (ResolveGatewayInstances, SetProgrammedCondition):
//
//   - no Service: Programmed False, AddressNotUsable;
//   - no available replica: Programmed False, AddressNotAssigned, "no
//     instances found" (istiod looks at the Service's endpoints; discovery
//     at the Deployment's availableReplicas, which is what makes them);
//   - a LoadBalancer without an ingress address: Programmed False,
//     AddressNotAssigned, "address pending";
//   - else Programmed True.
//
// Addresses: the LoadBalancer's ingress IPs and hostnames (and external
// IPs), else the Service's hostname, as istiod reports for its class
// (address type Hostname). Chosen differently from istiod: the addresses
// are reported as soon as the Service exists, not only once it has
// endpoints.
func (c *Controller) infraOf(g *gw.Gateway, objs *Objects) status.GatewayInfra {
	name := objs.Service.Name
	host := fmt.Sprintf("%s.%s.svc.%s", name, g.Namespace, c.opts.DomainSuffix)
	svc, err := c.services.Services(g.Namespace).Get(name)
	if err != nil {
		return status.GatewayInfra{Programmed: metav1.Condition{
			Status: metav1.ConditionFalse, Reason: string(gw.GatewayReasonAddressNotUsable),
			Message: fmt.Sprintf("Failed to assign to any requested addresses: hostname %q not found", host),
		}}
	}
	var external []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			external = append(external, in.IP)
		}
		if in.Hostname != "" {
			external = append(external, in.Hostname)
		}
	}
	external = append(external, svc.Spec.ExternalIPs...)
	inf := status.GatewayInfra{Addresses: addresses(external, host)}
	var internal []string
	seen := map[int32]bool{}
	for _, l := range g.Spec.Listeners {
		if !seen[int32(l.Port)] {
			seen[int32(l.Port)] = true
			internal = append(internal, host+":"+strconv.Itoa(int(l.Port)))
		}
	}
	sort.Strings(internal)
	dep, err := c.deployments.Deployments(g.Namespace).Get(objs.Deployment.Name)
	switch {
	case err != nil || dep.Status.AvailableReplicas == 0:
		inf.Programmed = metav1.Condition{
			Status: metav1.ConditionFalse, Reason: string(gw.GatewayReasonAddressNotAssigned),
			Message: fmt.Sprintf("Failed to assign to any requested addresses: no instances found for hostname %q", host),
		}
	case svc.Spec.Type == corev1.ServiceTypeLoadBalancer && len(external) == 0:
		inf.Programmed = metav1.Condition{
			Status: metav1.ConditionFalse, Reason: string(gw.GatewayReasonAddressNotAssigned),
			Message: fmt.Sprintf("Assigned to service(s) %s, but failed to assign to all requested addresses: address pending for hostname %q",
				humanJoin(internal), host),
		}
	default:
		inf.Programmed = metav1.Condition{
			Status: metav1.ConditionTrue, Reason: string(gw.GatewayReasonProgrammed),
			Message: "Resource programmed, assigned to service(s) " + humanJoin(internal),
		}
	}
	return inf
}

// addresses are external's, typed, else host as a Hostname.
func addresses(external []string, host string) []gw.GatewayStatusAddress {
	if len(external) == 0 {
		return []gw.GatewayStatusAddress{{Type: ptr(gw.HostnameAddressType), Value: host}}
	}
	out := make([]gw.GatewayStatusAddress, 0, len(external))
	for _, a := range external {
		t := gw.HostnameAddressType
		if _, err := netip.ParseAddr(a); err == nil {
			t = gw.IPAddressType
		}
		out = append(out, gw.GatewayStatusAddress{Type: ptr(t), Value: a})
	}
	return out
}

// humanJoin is istiod's HumanReadableJoin: "a", "a and b", "a, b, and c".
func humanJoin(ss []string) string {
	switch len(ss) {
	case 0:
		return ""
	case 1:
		return ss[0]
	case 2:
		return ss[0] + " and " + ss[1]
	}
	return strings.Join(ss[:len(ss)-1], ", ") + ", and " + ss[len(ss)-1]
}
