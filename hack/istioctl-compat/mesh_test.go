package istioctlcompat

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshplane/discovery/internal/testenv"
)

const (
	istioNS = "istio-system"
	// discoveryPod is the Pod of the installed Deployment that the test
	// stands in for the ReplicaSet controller to create.
	discoveryPod = "discovery-7d9c5b6f4-x2k8q"
	nodeName     = "node-0"
)

// mesh is discovery installed by `discovery bootstrap` on a real API
// server and running as `discovery serve` with the chart's ServiceAccount,
// with its Pod on a Node whose kubelet forwards the Pod's ports to it.
type mesh struct {
	env      *testenv.Env
	kubelet  *kubelet
	serve    *child
	istioctl string
	home     string // istioctl's HOME

	grpc, secure, webhook, monitor, ready string
}

// install sets the mesh up and waits until discovery is ready.
func install(t *testing.T, istioctlBin string) *mesh {
	t.Helper()
	m := &mesh{env: testenv.Start(t), istioctl: istioctlBin, home: t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go markDeploymentsAvailable(ctx, m.env)
	bctx, bcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer bcancel()
	out, err := exec.CommandContext(bctx, discoveryBinary(t), "bootstrap", "--profile", "minimal", "-y",
		"--kubeconfig", m.env.Kubeconfig, "--readiness-timeout", "2m").CombinedOutput()
	if err != nil {
		t.Fatalf("discovery bootstrap: %v\n%s", err, out)
	}
	// No controller-manager: nothing creates the namespace's "default"
	// ServiceAccount, whose token istioctl asks for to call the control
	// plane (as it does in every cluster).
	if _, err := m.env.Client.CoreV1().ServiceAccounts(istioNS).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyPendingChartChanges(t, m.env)

	m.kubelet = startKubelet(t, m.env.Client, nodeName)
	m.grpc, m.secure, m.webhook, m.monitor, m.ready = freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	m.createDiscoveryPod(t)
	for port, addr := range map[int32]string{15010: m.grpc, 15012: m.secure, 15017: m.webhook, 15014: m.monitor, 8080: m.ready} {
		m.kubelet.forward(istioNS, discoveryPod, port, addr)
	}
	pointWebhooksAt(t, m.env, "https://"+m.webhook)

	cmd := exec.Command(discoveryBinary(t), "serve",
		"--kubeconfig", asServiceAccount(t, m.env.Kubeconfig, istioNS, "discovery"),
		"--grpc-address", m.grpc, "--secure-grpc-address", m.secure, "--webhook-address", m.webhook,
		"--monitoring-address", m.monitor, "--readiness-address", m.ready,
		"--serving-cert-extra-names", "127.0.0.1")
	cmd.Env = append(os.Environ(), "POD_NAME="+discoveryPod)
	m.serve = startChild(t, "discovery", cmd)
	waitFor(t, 60*time.Second, "discovery /ready", func() bool {
		return httpStatus("http://"+m.ready+"/ready") == 200
	}, m.serve)
	return m
}

// createDiscoveryPod creates the Pod the installed Deployment's ReplicaSet
// would, from its template, bound to the test's Node, Running and Ready.
func (m *mesh) createDiscoveryPod(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	d, err := m.env.Client.AppsV1().Deployments(istioNS).Get(ctx, "discovery", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: *d.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	pod.Labels = podLabels(t, pod.Labels)
	pod.Name, pod.Namespace, pod.Spec.NodeName = discoveryPod, istioNS, nodeName
	pod, err = m.env.Client.CoreV1().Pods(istioNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		PodIP:     "10.244.0.5",
		PodIPs:    []corev1.PodIP{{IP: "10.244.0.5"}},
		HostIP:    "127.0.0.1",
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if _, err := m.env.Client.CoreV1().Pods(istioNS).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// run runs istioctl against the test cluster and returns its standard
// output and standard error.
func (m *mesh) run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.istioctl, append(args, "--kubeconfig", m.env.Kubeconfig)...)
	cmd.Env = []string{"HOME=" + m.home, "PATH=/usr/bin:/bin"}
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	t.Logf("istioctl %s:\n%s%s", strings.Join(args, " "), o.String(), e.String())
	return o.String(), e.String(), err
}

// asServiceAccount writes a kubeconfig that impersonates the ServiceAccount
// ns/name, to run discovery with the chart's RBAC.
func asServiceAccount(t *testing.T, kubeconfig, ns, name string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = "system:serviceaccount:" + ns + ":" + name
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// pointWebhooksAt makes the installed webhook configurations call base by
// URL instead of the istiod Service, which has no endpoints here (no kube
// proxy, no Pod network): the API server then reaches discovery directly.
func pointWebhooksAt(t *testing.T, env *testenv.Env, base string) {
	t.Helper()
	ctx := context.Background()
	adm := env.Client.AdmissionregistrationV1()
	mwc, err := adm.MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range mwc.Webhooks {
		url := base + "/inject"
		mwc.Webhooks[i].ClientConfig = admissionv1.WebhookClientConfig{URL: &url}
	}
	if _, err := adm.MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vwc, err := adm.ValidatingWebhookConfigurations().Get(ctx, "istio-validator-"+istioNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range vwc.Webhooks {
		url := base + "/validate"
		vwc.Webhooks[i].ClientConfig = admissionv1.WebhookClientConfig{URL: &url}
	}
	if _, err := adm.ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// markDeploymentsAvailable plays the Deployment controller for bootstrap's
// readiness wait until ctx ends.
func markDeploymentsAvailable(ctx context.Context, env *testenv.Env) {
	for ctx.Err() == nil {
		list, err := env.Client.AppsV1().Deployments(istioNS).List(ctx, metav1.ListOptions{})
		for i := range list.Items {
			if err != nil {
				break
			}
			d := &list.Items[i]
			n := int32(1)
			if d.Spec.Replicas != nil {
				n = *d.Spec.Replicas
			}
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
				Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}}
			_, _ = env.Client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
