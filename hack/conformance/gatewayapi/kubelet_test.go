package gatewayapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// kubelet stands in for what a cluster's controller manager and kubelets
// do, which a bare kube-apiserver lacks: a Deployment's replicas become
// Pods that are Running and Ready with an address, a Service's selected
// Pods become an EndpointSlice, and every namespace has its default
// ServiceAccount. Nothing runs in the Pods: the echo backends' answers
// are made up from the evaluator's decision (roundtrip_test.go), and the
// Pod's address is how a decision's upstream host names its Pod. Every
// Pod is on one Node, whose kubelet endpoint serves the mesh tests'
// exec (exec_test.go).
type kubelet struct {
	c kubernetes.Interface

	mu     sync.Mutex
	next   netip.Addr
	nextLB netip.Addr
	// pods by IP, for the round tripper.
	byIP map[string]*corev1.Pod
}

func newKubelet(c kubernetes.Interface) *kubelet {
	return &kubelet{c: c, next: netip.MustParseAddr("10.244.0.10"), nextLB: netip.MustParseAddr("172.18.255.10"), byIP: map[string]*corev1.Pod{}}
}

// run reconciles every second until ctx ends. Polling keeps it short; a
// second is well within the suite's timeouts.
func (k *kubelet) run(ctx context.Context, t *testing.T) {
	for {
		if err := k.reconcile(ctx); err != nil && ctx.Err() == nil {
			t.Logf("kubelet: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// pod returns the Pod with that IP.
func (k *kubelet) pod(ip string) *corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byIP[ip]
}

func (k *kubelet) reconcile(ctx context.Context) error {
	nss, err := k.c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ns := range nss.Items {
		if ns.DeletionTimestamp != nil {
			continue
		}
		if _, err := k.c.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = k.c.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
	}
	deps, err := k.c.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := k.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	owned := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		if d := p.Labels[ownerLabel]; d != "" {
			owned[p.Namespace+"/"+d] = append(owned[p.Namespace+"/"+d], p)
		}
	}
	wanted := map[string]bool{}
	for i := range deps.Items {
		d := &deps.Items[i]
		key := d.Namespace + "/" + d.Name
		wanted[key] = true
		if err := k.scale(ctx, d, owned[key]); err != nil {
			return fmt.Errorf("deployment %s: %w", key, err)
		}
	}
	for key, ps := range owned {
		if wanted[key] {
			continue
		}
		for _, p := range ps {
			if err := k.c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	if err := k.index(ctx); err != nil {
		return err
	}
	if err := k.loadBalancers(ctx); err != nil {
		return err
	}
	return k.endpointSlices(ctx)
}

// ownerLabel marks the Pods the simulator made for a Deployment.
const ownerLabel = "conformance.meshplane.io/deployment"

// scale makes the Deployment's Pods match its replicas and its current
// template: Pods of an older template are replaced.
func (k *kubelet) scale(ctx context.Context, d *appsv1.Deployment, have []corev1.Pod) error {
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	hash := templateHash(d)
	var current []corev1.Pod
	for _, p := range have {
		if p.Labels["pod-template-hash"] != hash || len(current) >= replicas {
			if err := k.c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			continue
		}
		current = append(current, p)
	}
	for i := len(current); i < replicas; i++ {
		if err := k.start(ctx, d, hash); err != nil {
			return err
		}
	}
	r := int32(replicas)
	if d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == r && d.Status.Replicas == r {
		return nil
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}}}
	_, err := k.c.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	return err
}

// loadBalancers gives each LoadBalancer Service an ingress address, as a
// cloud's (or MetalLB's) controller does.
func (k *kubelet) loadBalancers(ctx context.Context) error {
	svcs, err := k.c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) > 0 {
			continue
		}
		k.mu.Lock()
		ip := k.nextLB
		k.nextLB = k.nextLB.Next()
		k.mu.Unlock()
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
		if _, err := k.c.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("LoadBalancer address of %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	}
	return nil
}

func templateHash(d *appsv1.Deployment) string {
	sum := sha256.Sum256([]byte(d.Spec.Template.String()))
	return fmt.Sprintf("%x", sum[:5])
}

// start creates one Pod of the Deployment, Running and Ready.
func (k *kubelet) start(ctx context.Context, d *appsv1.Deployment, hash string) error {
	tmpl := d.Spec.Template.DeepCopy()
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.GenerateName = d.Name + "-" + hash + "-"
	pod.Namespace = d.Namespace
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[ownerLabel] = d.Name
	pod.Labels["pod-template-hash"] = hash
	pod.Spec.NodeName = nodeName
	created, err := k.c.CoreV1().Pods(d.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	k.mu.Lock()
	ip := k.next
	k.next = k.next.Next()
	k.mu.Unlock()
	now := metav1.Now()
	created.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		PodIP:     ip.String(),
		PodIPs:    []corev1.PodIP{{IP: ip.String()}},
		HostIP:    "10.0.0.1",
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	_, err = k.c.CoreV1().Pods(d.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// index refreshes the IP to Pod table.
func (k *kubelet) index(ctx context.Context) error {
	pods, err := k.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	m := map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			m[p.Status.PodIP] = p
		}
	}
	k.mu.Lock()
	k.byIP = m
	k.mu.Unlock()
	return nil
}

// endpointSlices keeps one EndpointSlice per Service with a selector, as
// the EndpointSlice controller does.
func (k *kubelet) endpointSlices(ctx context.Context) error {
	svcs, err := k.c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	k.mu.Lock()
	var pods []*corev1.Pod
	for _, p := range k.byIP {
		pods = append(pods, p)
	}
	k.mu.Unlock()
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	for _, svc := range svcs.Items {
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		want := sliceFor(&svc, pods)
		cur, err := k.c.DiscoveryV1().EndpointSlices(svc.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = k.c.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, want, metav1.CreateOptions{})
		case err == nil:
			if sameSlice(cur, want) {
				continue
			}
			want.ResourceVersion = cur.ResourceVersion
			_, err = k.c.DiscoveryV1().EndpointSlices(svc.Namespace).Update(ctx, want, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("EndpointSlice of %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	}
	return nil
}

func sliceFor(svc *corev1.Service, pods []*corev1.Pod) *discoveryv1.EndpointSlice {
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      svc.Name + "-conformance",
			Namespace: svc.Namespace,
			Labels:    map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "conformance.meshplane.io"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	var matched []*corev1.Pod
	for _, p := range pods {
		if p.Namespace == svc.Namespace && sel.Matches(labels.Set(p.Labels)) {
			matched = append(matched, p)
		}
	}
	for _, sp := range svc.Spec.Ports {
		port := targetPort(sp, matched)
		proto := sp.Protocol
		name := sp.Name
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: &name, Port: &port, Protocol: &proto, AppProtocol: sp.AppProtocol})
	}
	ready := true
	for _, p := range matched {
		node := p.Spec.NodeName
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &node,
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		})
	}
	return es
}

// targetPort resolves a Service port's targetPort: a number, or the name
// of a container port of the selected Pods.
func targetPort(sp corev1.ServicePort, pods []*corev1.Pod) int32 {
	switch {
	case sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0:
		return sp.TargetPort.IntVal
	case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
		for _, p := range pods {
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name == sp.TargetPort.StrVal {
						return cp.ContainerPort
					}
				}
			}
		}
	}
	return sp.Port
}

func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	return a.AddressType == b.AddressType && portsKey(a) == portsKey(b) && endpointsKey(a) == endpointsKey(b)
}

func portsKey(es *discoveryv1.EndpointSlice) string {
	var parts []string
	for _, p := range es.Ports {
		s := fmt.Sprintf("%s/%d/%s", deref(p.Name), deref(p.Port), deref(p.Protocol))
		if p.AppProtocol != nil {
			s += "/" + *p.AppProtocol
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ";")
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func endpointsKey(es *discoveryv1.EndpointSlice) string {
	var parts []string
	for _, e := range es.Endpoints {
		parts = append(parts, strings.Join(e.Addresses, ",")+"/"+e.TargetRef.Name)
	}
	return strings.Join(parts, ";")
}
