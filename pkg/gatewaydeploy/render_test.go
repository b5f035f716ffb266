package gatewaydeploy

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	gw "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshplane/discovery/pkg/webhook/inject"
)

// builtinPods renders with the injector's built-in configuration.
type builtinPods struct {
	cfg    *inject.Config
	values inject.Values
}

func (b builtinPods) RenderPod(p *corev1.Pod) (*corev1.Pod, error) {
	return inject.RenderPod(p, b.cfg, b.values, inject.Env{})
}

func newPods(t *testing.T) PodRenderer {
	t.Helper()
	cfg, err := inject.DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	values, err := inject.ParseValues([]byte("global:\n  discoveryAddress: discovery.istio-system.svc:15012\n"))
	if err != nil {
		t.Fatal(err)
	}
	return builtinPods{cfg, values}
}

var _ PodRenderer = (*inject.Injector)(nil)

func gateway(mut ...func(*gw.Gateway)) *gw.Gateway {
	g := &gw.Gateway{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "shop", UID: types.UID("uid-1"),
			Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "x", ControllerVersionAnnotation: "5"},
		},
		Spec: gw.GatewaySpec{GatewayClassName: "istio", Listeners: []gw.Listener{
			{Name: "http", Port: 80, Protocol: gw.HTTPProtocolType},
			{Name: "https.example", Port: 443, Protocol: gw.HTTPSProtocolType},
			{Name: "http-again", Port: 80, Protocol: gw.HTTPProtocolType},
		}},
	}
	for _, m := range mut {
		m(g)
	}
	return g
}

func render(t *testing.T, g *gw.Gateway, params map[string]string) *Objects {
	t.Helper()
	objs, err := Render(Input{Gateway: g, DefaultServiceType: corev1.ServiceTypeLoadBalancer, Parameters: params, Pods: newPods(t)})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestRenderNamesLabelsAndOwnerOfEveryObject(t *testing.T) {
	objs := render(t, gateway(), nil)
	wantOwner := []metav1.OwnerReference{{APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway", Name: "web", UID: "uid-1"}}
	wantLabels := map[string]string{"team": "a", GatewayNameLabel: "web", GatewayClassLabel: "istio", ManagedLabel: ManagedValue}
	for _, m := range []metav1.ObjectMeta{objs.ServiceAccount.ObjectMeta, objs.Deployment.ObjectMeta, objs.Service.ObjectMeta} {
		if m.Name != "web-istio" || m.Namespace != "shop" {
			t.Errorf("object %s/%s, want shop/web-istio", m.Namespace, m.Name)
		}
		if !reflect.DeepEqual(m.OwnerReferences, wantOwner) {
			t.Errorf("%s owner references %+v, want %+v", m.Name, m.OwnerReferences, wantOwner)
		}
		if !reflect.DeepEqual(m.Labels, wantLabels) {
			t.Errorf("%s labels %v, want %v", m.Name, m.Labels, wantLabels)
		}
		if !reflect.DeepEqual(m.Annotations, map[string]string{"note": "x"}) {
			t.Errorf("%s annotations %v, want the Gateway's without Istio's controller-version", m.Name, m.Annotations)
		}
	}
}

func TestRenderDeploymentRunsTheInjectorsGatewayProxy(t *testing.T) {
	d := render(t, gateway(), nil).Deployment
	if got := d.Spec.Selector.MatchLabels; !reflect.DeepEqual(got, map[string]string{GatewayNameLabel: "web"}) {
		t.Fatalf("selector %v", got)
	}
	tl := d.Spec.Template.Labels
	for k, v := range map[string]string{
		GatewayNameLabel: "web", GatewayClassLabel: "istio", ManagedLabel: ManagedValue,
		"service.istio.io/canonical-name": "web-istio", "service.istio.io/canonical-revision": "latest", "sidecar.istio.io/inject": "false", "team": "a",
	} {
		if tl[k] != v {
			t.Errorf("pod label %s=%q, want %q", k, tl[k], v)
		}
	}
	if _, ok := d.Spec.Template.Annotations["inject.istio.io/templates"]; ok {
		t.Error("the rendered pod still asks for injection templates")
	}
	spec := d.Spec.Template.Spec
	if spec.ServiceAccountName != "web-istio" || len(spec.Containers) != 1 {
		t.Fatalf("service account %q, %d containers", spec.ServiceAccountName, len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Name != "istio-proxy" || c.Image != "docker.io/istio/proxyv2:1.32.0" {
		t.Errorf("container %s image %s, want istio-proxy of the injector's proxy image", c.Name, c.Image)
	}
	if len(c.Args) < 2 || c.Args[0] != "proxy" || c.Args[1] != "router" {
		t.Errorf("args %v, want pilot-agent proxy router", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["CA_ADDR"] != "discovery.istio-system.svc:15012" || !strings.Contains(env["PROXY_CONFIG"], "discovery.istio-system.svc:15012") {
		t.Errorf("CA_ADDR %q, PROXY_CONFIG %q: want discovery's 15012", env["CA_ADDR"], env["PROXY_CONFIG"])
	}
	if env["ISTIO_META_WORKLOAD_NAME"] != "web-istio" {
		t.Errorf("workload name %q", env["ISTIO_META_WORKLOAD_NAME"])
	}
}

func TestRenderServicePortsFromListenersAndStatusPort(t *testing.T) {
	g := gateway(func(g *gw.Gateway) {
		g.Spec.Listeners = append(g.Spec.Listeners, gw.Listener{Name: "status-port", Port: 8443, Protocol: gw.TLSProtocolType},
			gw.Listener{Name: gw.SectionName(strings.Repeat("a", 70)), Port: 9000, Protocol: gw.TCPProtocolType})
	})
	svc := render(t, g, nil).Service
	type port struct {
		name  string
		port  int32
		proto string
	}
	var got []port
	for _, p := range svc.Spec.Ports {
		if p.Protocol != corev1.ProtocolTCP {
			t.Errorf("port %s protocol %s", p.Name, p.Protocol)
		}
		got = append(got, port{p.Name, p.Port, *p.AppProtocol})
	}
	want := []port{
		{"status-port", 15021, "tcp"},
		{"http", 80, "http"},
		{"https-example", 443, "https"},
		{"status-port-8443", 8443, "tls"},
		{strings.Repeat("a", 63), 9000, "tcp"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ports %v\nwant  %v", got, want)
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || !reflect.DeepEqual(svc.Spec.Selector, map[string]string{GatewayNameLabel: "web"}) {
		t.Errorf("type %s selector %v", svc.Spec.Type, svc.Spec.Selector)
	}
}

func TestRenderHonoursGatewaySettings(t *testing.T) {
	ipType := gw.IPAddressType
	cases := map[string]struct {
		gateway *gw.Gateway
		check   func(t *testing.T, o *Objects)
	}{
		"the service-type annotation sets the Service's type": {
			gateway(func(g *gw.Gateway) { g.Annotations[ServiceTypeAnnotation] = "ClusterIP" }),
			func(t *testing.T, o *Objects) {
				t.Helper()
				if o.Service.Spec.Type != corev1.ServiceTypeClusterIP {
					t.Errorf("type %s", o.Service.Spec.Type)
				}
			},
		},
		"infrastructure labels and annotations replace the Gateway's, without the gateway API's prefix": {
			gateway(func(g *gw.Gateway) {
				g.Spec.Infrastructure = &gw.GatewayInfrastructure{
					Labels:      map[gw.LabelKey]gw.LabelValue{"infra": "yes", "gateway.networking.k8s.io/x": "dropped"},
					Annotations: map[gw.AnnotationKey]gw.AnnotationValue{"cost": "low"},
				}
			}),
			func(t *testing.T, o *Objects) {
				t.Helper()
				if l := o.Service.Labels; l["infra"] != "yes" || l["team"] != "" || l["gateway.networking.k8s.io/x"] != "" {
					t.Errorf("labels %v", l)
				}
				if a := o.Deployment.Annotations; !reflect.DeepEqual(a, map[string]string{"cost": "low"}) {
					t.Errorf("annotations %v", a)
				}
				if o.Deployment.Spec.Template.Labels["infra"] != "yes" || o.Deployment.Spec.Template.Annotations["cost"] != "low" {
					t.Errorf("pod metadata %v %v", o.Deployment.Spec.Template.Labels, o.Deployment.Spec.Template.Annotations)
				}
			},
		},
		"name and service account overrides": {
			gateway(func(g *gw.Gateway) {
				g.Annotations[NameOverrideAnnotation] = "edge"
				g.Annotations[ServiceAccountAnnotation] = "edge-sa"
			}),
			func(t *testing.T, o *Objects) {
				t.Helper()
				if o.Deployment.Name != "edge" || o.Service.Name != "edge" || o.ServiceAccount.Name != "edge-sa" ||
					o.Deployment.Spec.Template.Spec.ServiceAccountName != "edge-sa" {
					t.Errorf("names %s %s %s", o.Deployment.Name, o.Service.Name, o.ServiceAccount.Name)
				}
				if _, ok := o.Service.Annotations[NameOverrideAnnotation]; ok {
					t.Error("Istio's own annotation copied")
				}
			},
		},
		"a single IP address is the LoadBalancer's IP": {
			gateway(func(g *gw.Gateway) {
				g.Spec.Addresses = []gw.GatewaySpecAddress{{Type: &ipType, Value: "10.0.0.7"}}
			}),
			func(t *testing.T, o *Objects) {
				t.Helper()
				if o.Service.Spec.LoadBalancerIP != "10.0.0.7" {
					t.Errorf("loadBalancerIP %q", o.Service.Spec.LoadBalancerIP)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { tc.check(t, render(t, tc.gateway, nil)) })
	}
}

func TestRenderParametersOverlay(t *testing.T) {
	o := render(t, gateway(), map[string]string{
		"deployment":     "spec:\n  replicas: 3\n  template:\n    spec:\n      containers:\n      - name: istio-proxy\n        resources:\n          limits:\n            cpu: 500m\n",
		"service":        "metadata:\n  annotations:\n    lb: internal\nspec:\n  type: NodePort\n",
		"serviceAccount": "metadata:\n  labels:\n    extra: \"1\"\n",
	})
	if o.Deployment.Spec.Replicas == nil || *o.Deployment.Spec.Replicas != 3 {
		t.Errorf("replicas %v", o.Deployment.Spec.Replicas)
	}
	c := o.Deployment.Spec.Template.Spec.Containers
	if len(c) != 1 || c[0].Resources.Limits.Cpu().String() != "500m" || len(c[0].Args) == 0 {
		t.Errorf("container not merged by name: %+v", c)
	}
	if o.Service.Spec.Type != corev1.ServiceTypeNodePort || o.Service.Annotations["lb"] != "internal" || o.Service.Annotations["note"] != "x" {
		t.Errorf("service %s %v", o.Service.Spec.Type, o.Service.Annotations)
	}
	if o.ServiceAccount.Labels["extra"] != "1" || o.ServiceAccount.Labels[ManagedLabel] != ManagedValue {
		t.Errorf("service account labels %v", o.ServiceAccount.Labels)
	}
}

func TestRenderRefuses(t *testing.T) {
	cases := map[string]struct {
		gateway *gw.Gateway
		params  map[string]string
		want    string
	}{
		"an unknown service type":                      {gateway(func(g *gw.Gateway) { g.Annotations[ServiceTypeAnnotation] = "ExternalName" }), nil, "ExternalName"},
		"an overlay of a kind discovery does not make": {gateway(), map[string]string{"horizontalPodAutoscaler": "spec: {}"}, `key "horizontalPodAutoscaler" is not supported`},
		"an overlay that renames the object":           {gateway(), map[string]string{"service": "metadata:\n  name: other\n"}, "may not change"},
		"an overlay that drops the owner":              {gateway(), map[string]string{"deployment": "metadata:\n  ownerReferences: null\n"}, "may not change"},
		"an overlay that is not YAML":                  {gateway(), map[string]string{"service": "{"}, "service"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Render(Input{Gateway: tc.gateway, DefaultServiceType: corev1.ServiceTypeLoadBalancer, Parameters: tc.params, Pods: newPods(t)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestManagedAndManagedByUs(t *testing.T) {
	ip, host := gw.IPAddressType, gw.HostnameAddressType
	cases := map[string]struct {
		addrs   []gw.GatewaySpecAddress
		version string
		managed bool
		ours    bool
	}{
		"no addresses":                     {nil, "", true, true},
		"one IP":                           {[]gw.GatewaySpecAddress{{Type: &ip, Value: "1.2.3.4"}}, "", true, true},
		"a hostname: manual mode":          {[]gw.GatewaySpecAddress{{Type: &host, Value: "ingress"}}, "", false, true},
		"two IPs: manual mode":             {[]gw.GatewaySpecAddress{{Type: &ip, Value: "1.2.3.4"}, {Type: &ip, Value: "1.2.3.5"}}, "", false, true},
		"an older controller version":      {nil, "1", true, true},
		"a newer controller version":       {nil, "6", true, false},
		"a controller version not numeric": {nil, "v5", true, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := gateway(func(g *gw.Gateway) {
				g.Spec.Addresses = tc.addrs
				delete(g.Annotations, ControllerVersionAnnotation)
				if tc.version != "" {
					g.Annotations[ControllerVersionAnnotation] = tc.version
				}
			})
			if got := Managed(&g.Spec); got != tc.managed {
				t.Errorf("Managed = %v, want %v", got, tc.managed)
			}
			if got := ManagedByUs(g); got != tc.ours {
				t.Errorf("ManagedByUs = %v, want %v", got, tc.ours)
			}
		})
	}
}

func TestUnstructuredIsAnApplyBody(t *testing.T) {
	u, err := Unstructured(render(t, gateway(), nil).Deployment)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Object["status"]; ok {
		t.Error("status in the apply body")
	}
	if u.GetKind() != "Deployment" || u.GetAPIVersion() != "apps/v1" {
		t.Errorf("kind %s/%s", u.GetAPIVersion(), u.GetKind())
	}
	if _, ok := u.Object["metadata"].(map[string]any)["creationTimestamp"]; ok {
		t.Error("creationTimestamp in the apply body")
	}
	s, err := Unstructured(render(t, gateway(), nil).Service)
	if err != nil {
		t.Fatal(err)
	}
	ports, _, _ := unstructured.NestedSlice(s.Object, "spec", "ports")
	for _, p := range ports {
		if tp, ok := p.(map[string]any)["targetPort"]; ok {
			t.Errorf("port %v has targetPort %v, want it unset (the port)", p.(map[string]any)["name"], tp)
		}
	}
}
