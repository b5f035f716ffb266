package install

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The plaintext xDS server (no TLS, no authentication) is reachable from
// the network only when values.pilot.plaintextXDS turns it on; otherwise
// it listens on the Pod's loopback and no Service or container port names
// 15010. Every profile that installs discovery is off by default.
func TestPlaintextXDSStaysOnLoopbackUnlessTurnedOn(t *testing.T) {
	tests := map[string]struct {
		in       Input
		wantArg  string
		wantPort bool
	}{
		"the default profile keeps it on loopback": {in: Input{Profile: "default"}, wantArg: "--grpc-address=127.0.0.1:15010"},
		"the demo profile keeps it on loopback":    {in: Input{Profile: "demo"}, wantArg: "--grpc-address=127.0.0.1:15010"},
		"the minimal profile keeps it on loopback": {in: Input{Profile: "minimal"}, wantArg: "--grpc-address=127.0.0.1:15010"},
		"a canary revision keeps it on loopback":   {in: Input{Profile: "minimal", Revision: "canary"}, wantArg: "--grpc-address=127.0.0.1:15010"},
		"values.pilot.plaintextXDS=true serves it on the Pod and the Services": {
			in: Input{Sets: []string{"values.pilot.plaintextXDS=true"}}, wantArg: "--grpc-address=:15010", wantPort: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := Render(renderOpts(), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var deployments, services int
			for _, o := range m.Objects() {
				switch o.GetKind() {
				case "Deployment":
					var d appsv1.Deployment
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
						t.Fatal(err)
					}
					if d.Labels["app"] != "discovery" {
						continue
					}
					deployments++
					c := d.Spec.Template.Spec.Containers[0]
					if !slices.Contains(c.Args, tc.wantArg) {
						t.Errorf("Deployment %s args %v, want %s", d.Name, c.Args, tc.wantArg)
					}
					has := slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == 15010 })
					if has != tc.wantPort {
						t.Errorf("Deployment %s: containerPort 15010 %v, want %v", d.Name, has, tc.wantPort)
					}
				case "Service":
					var s corev1.Service
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s); err != nil {
						t.Fatal(err)
					}
					if s.Labels["app"] != "discovery" {
						continue
					}
					services++
					has := slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 15010 || p.TargetPort.IntValue() == 15010 })
					if has != tc.wantPort {
						t.Errorf("Service %s: port 15010 %v, want %v", s.Name, has, tc.wantPort)
					}
				}
			}
			if deployments != 1 || services != 2 {
				t.Fatalf("rendered %d discovery Deployments and %d Services, want 1 and 2", deployments, services)
			}
		})
	}
}
