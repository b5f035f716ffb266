package gen

import (
	"testing"

	"github.com/meshplane/discovery/pkg/model"
)

// A hostname several services have belongs to one of them per proxy
// namespace, as in istiod's sidecar scope.
func TestOwnHosts(t *testing.T) {
	kube := func(ns, host string) *model.Service {
		return &model.Service{Name: "svc", Namespace: ns, Hostname: host}
	}
	entry := func(ns, name, host string) *model.Service {
		return &model.Service{Name: name, Namespace: ns, Hostname: host, Entry: &model.ServiceEntryInfo{Name: name}}
	}
	keys := func(svcs []*model.Service) (out []string) {
		for _, s := range svcs {
			out = append(out, s.Namespace+"/"+s.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []*model.Service
		ns   string
		want []string
	}{
		{"distinct hosts are all kept", []*model.Service{kube("a", "x.a"), entry("b", "e", "y.b")}, "c", []string{"a/svc", "b/e"}},
		{"a Service beats an entry of its name elsewhere", []*model.Service{kube("a", "x.a"), entry("b", "squat", "x.a")}, "c", []string{"a/svc"}},
		{"a Service beats an entry of its name in its namespace", []*model.Service{entry("a", "e", "x.a"), kube("a", "x.a")}, "c", []string{"a/svc"}},
		{"the proxy's namespace wins over a Service elsewhere", []*model.Service{kube("a", "x.a"), entry("c", "mine", "x.a")}, "c", []string{"c/mine"}},
		{"else the first", []*model.Service{entry("a", "e1", "h"), entry("b", "e2", "h")}, "c", []string{"a/e1"}},
		{"entries of one namespace share a host", []*model.Service{entry("a", "e1", "h"), entry("a", "e2", "h")}, "c", []string{"a/e1", "a/e2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := keys(ownHosts(tc.in, tc.ns))
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}
