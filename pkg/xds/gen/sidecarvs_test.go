package gen

import (
	"fmt"
	"strings"
	"testing"
)

// sidecarVSWorld has VirtualServices for hosts of "default" in "default"
// and in "other"; the one in "other" is older, so it comes first wherever
// it is imported.
const sidecarVSWorld = `apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.96.0.11
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: details, namespace: default}
spec:
  clusterIP: 10.96.0.12
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: ratings, namespace: other}
spec:
  clusterIP: 10.96.1.11
  ports: [{name: http, port: 9080}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews-local, namespace: default, creationTimestamp: "2024-02-01T00:00:00Z"}
spec:
  hosts: [reviews]
  http: [{route: [{destination: {host: reviews}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews-from-other, namespace: other, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  hosts: [reviews.default.svc.cluster.local]
  http: [{route: [{destination: {host: reviews.default.svc.cluster.local}, headers: {request: {set: {from: other}}}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: wild, namespace: other, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  hosts: ["*.default.svc.cluster.local"]
  http: [{route: [{destination: {host: details.default.svc.cluster.local}}]}]
`

func TestSidecarEgressImportsVirtualServicesByNamespace(t *testing.T) {
	const (
		reviews = "reviews.default.svc.cluster.local"
		details = "details.default.svc.cluster.local"
	)
	tests := map[string]struct {
		hosts            []string // the Sidecar's egress hosts; nil for no Sidecar
		reviews, details string   // the VirtualServices for each host, in order
	}{
		"without Sidecar every exported VirtualService applies": {
			reviews: "other/reviews-from-other,default/reviews-local", details: "other/wild",
		},
		"./* imports the VirtualServices of the proxy's namespace only": {
			hosts: []string{"./*"}, reviews: "default/reviews-local",
		},
		"*/* imports every namespace's": {
			hosts: []string{"*/*"}, reviews: "other/reviews-from-other,default/reviews-local", details: "other/wild",
		},
		"other/* imports the other namespace's": {
			hosts: []string{"./*", "other/*"}, reviews: "other/reviews-from-other,default/reviews-local", details: "other/wild",
		},
		"a host of the other namespace that no VirtualService there names imports none of them": {
			hosts: []string{"./*", "other/ratings.other.svc.cluster.local"}, reviews: "default/reviews-local",
		},
		"a VirtualService host named exactly is imported from that namespace, and one whose wildcard covers it": {
			hosts: []string{"./*", "other/reviews.default.svc.cluster.local"}, reviews: "other/reviews-from-other,default/reviews-local", details: "other/wild",
		},
		"a wildcard VirtualService host covering an imported name is imported (Istio matches both ways)": {
			hosts: []string{"./*", "other/details.default.svc.cluster.local"}, reviews: "default/reviews-local", details: "other/wild",
		},
		"an imported wildcard covering a VirtualService host imports it": {
			hosts: []string{"./*", "*/*.default.svc.cluster.local"}, reviews: "other/reviews-from-other,default/reviews-local", details: "other/wild",
		},
		"~/* excludes everything its listener imports (Istio's exclusion)": {
			hosts: []string{"./*", "~/*"},
		},
		"~NAMESPACE/* excludes that namespace's": {
			hosts: []string{"*/*", "~other/*"}, reviews: "default/reviews-local",
		},
		"~NAMESPACE/HOST excludes that host of that namespace's VirtualServices only": {
			hosts: []string{"*/*", "~other/reviews.default.svc.cluster.local"}, reviews: "default/reviews-local", details: "other/wild",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			y := sidecarVSWorld
			if tc.hosts != nil {
				y += fmt.Sprintf("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: default}\nspec:\n  egress: [{hosts: [\"%s\"]}]\n",
					strings.Join(tc.hosts, `", "`))
			}
			w := loadWorld(t, y).World()
			sc := scopeOf(w, labelled(t, "sidecar", "default", nil))
			for host, want := range map[string]string{reviews: tc.reviews, details: tc.details} {
				var got []string
				for _, c := range sc.VirtualServices(host, "mesh") {
					got = append(got, c.Key.Namespace+"/"+c.Key.Name)
				}
				if strings.Join(got, ",") != want {
					t.Errorf("VirtualServices of %s: %v, want %q", host, got, want)
				}
			}
		})
	}
}
