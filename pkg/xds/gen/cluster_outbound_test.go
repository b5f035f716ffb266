package gen

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

const dbHost = "db.default.svc.cluster.local"

// classCluster returns the cluster name of cc, or nil.
func classCluster(t *testing.T, cc *ClassConfig, name string) *clusterv3.Cluster {
	t.Helper()
	r := cc.Sets[ClusterType].Get(name)
	if r == nil {
		return nil
	}
	c := &clusterv3.Cluster{}
	if err := r.Any.UnmarshalTo(c); err != nil {
		t.Fatal(err)
	}
	return c
}

// socketSANs returns what an Istio mTLS transport socket verifies: its SNI
// and the exact URI SANs of its validation context ("" and nil for a
// plaintext or absent socket).
func socketSANs(t *testing.T, ts *corev3.TransportSocket) (string, []string) {
	t.Helper()
	if ts == nil || ts.GetName() != "envoy.transport_sockets.tls" {
		return "", nil
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	var sans []string
	for _, m := range ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames() {
		if m.GetSanType() != tlsv3.SubjectAltNameMatcher_URI {
			t.Errorf("SAN matcher %v is not of type URI", m)
		}
		sans = append(sans, m.GetMatcher().GetExact())
	}
	return ctx.GetSni(), sans
}

// meshSocket is the socket a cluster uses for an endpoint in the mesh.
func meshSocket(c *clusterv3.Cluster) *corev3.TransportSocket {
	return socketFor(c, tlsModeMetadata(&model.Endpoint{Labels: map[string]string{TLSModeLabel: "istio"}}))
}

func TestPassthroughClustersByProxy(t *testing.T) {
	store, err := worldtest.LoadFile("testdata/headless-mtls/input.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := store.World()
	db := ClusterName(5432, "", dbHost)
	tests := map[string]struct {
		proxy    *model.Proxy
		wantType clusterv3.Cluster_DiscoveryType
	}{
		"a sidecar's cluster of a headless service goes to the original destination": {proxy: sidecar(t, "default"), wantType: clusterv3.Cluster_ORIGINAL_DST},
		"a gateway's is EDS: it has no original destination":                         {proxy: routerProxy(t, "istio=ingressgateway"), wantType: clusterv3.Cluster_EDS},
		"a proxyless gRPC client's is EDS, as Istio's grpcgen makes every cluster":   {proxy: grpcProxy(t, "default"), wantType: clusterv3.Cluster_EDS},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// One generator for all: the part cache must not hand a
			// sidecar's clusters to a gateway or the reverse.
			g := newForTest(quietLog())
			for _, p := range []*model.Proxy{sidecar(t, "default"), routerProxy(t, "istio=ingressgateway"), tc.proxy} {
				if _, err := g.Class(w, p, nil); err != nil {
					t.Fatal(err)
				}
			}
			// Class checks consistent(): an error would mean an EDS
			// resource without an EDS cluster, or the reverse.
			cc, err := g.Class(w, tc.proxy, nil)
			if err != nil {
				t.Fatalf("configuration not consistent: %v", err)
			}
			c := classCluster(t, cc, db)
			if c == nil {
				t.Fatalf("no cluster %s", db)
			}
			if c.GetType() != tc.wantType {
				t.Errorf("cluster type %v, want %v", c.GetType(), tc.wantType)
			}
			hasCLA := cc.Sets[EndpointType].Get(db) != nil
			eds := tc.wantType == clusterv3.Cluster_EDS
			if hasCLA != eds || (c.GetEdsClusterConfig() != nil) != eds {
				t.Errorf("ClusterLoadAssignment present %v, eds_cluster_config %v; want both %v", hasCLA, c.GetEdsClusterConfig(), eds)
			}
			if got := cc.EndpointsOf[model.NamespacedName{Namespace: "default", Name: "db"}]; eds != (len(got) > 0) {
				t.Errorf("EndpointsOf(db) = %v", got)
			}
			if !eds && (c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED || c.GetLbConfig() != nil) {
				t.Errorf("ORIGINAL_DST cluster has lb_policy %v and %v, want CLUSTER_PROVIDED only (the rule's consistent hash cannot apply)", c.GetLbPolicy(), c.GetLbConfig())
			}
		})
	}
}

func TestHeadlessEndpointUpdates(t *testing.T) {
	store, err := worldtest.LoadFile("testdata/headless-mtls/input.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := newForTest(quietLog())
	side, err := g.Class(store.World(), sidecar(t, "default"), nil)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := g.Class(store.World(), routerProxy(t, "istio=ingressgateway"), nil)
	if err != nil {
		t.Fatal(err)
	}
	db := []model.NamespacedName{{Namespace: "default", Name: "db"}}
	apply := func(yaml string) *model.World { return applyYAML(t, store, yaml) }
	const slice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, namespace: default, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: tcp-pg, port: 5432}, {name: http-admin, port: 8080}]
endpoints:
- addresses: [10.1.3.10]
  targetRef: {kind: Pod, name: db-0, namespace: default}
- addresses: [10.1.3.11]
  targetRef: {kind: Pod, name: db-1, namespace: default}
`
	// A third replica of the StatefulSet: same account, in the mesh.
	scaled := apply(`apiVersion: v1
kind: Pod
metadata: {name: db-2, namespace: default, labels: {app: db, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: db, containers: [{name: pg, image: pg}]}
status: {podIP: 10.1.3.12, conditions: [{type: Ready, status: "True"}]}
---
` + slice + `- addresses: [10.1.3.12]
  targetRef: {kind: Pod, name: db-2, namespace: default}
`)
	if IdentitiesChanged(side, scaled, db) || IdentitiesChanged(gw, scaled, db) {
		t.Error("a replica of the same account in the mesh reported as changing the clusters")
	}
	if _, changed := g.UpdateEndpoints(side, scaled, db); len(changed) != 0 {
		t.Errorf("the sidecar's ORIGINAL_DST clusters have no endpoints, yet %v changed", changed)
	}
	next, changed := g.UpdateEndpoints(gw, scaled, db)
	if !slices.Contains(changed, ClusterName(5432, "", dbHost)) {
		t.Errorf("the gateway's EDS endpoints of db did not change: %v", changed)
	}
	if got := edsAddresses(t, next, ClusterName(5432, "", dbHost)); !strings.Contains(got, "10.1.3.12") {
		t.Errorf("gateway endpoints %s lack the new replica", got)
	}
	// A replica without a sidecar: the sidecar's mTLS to db must stop.
	mixed := apply(`apiVersion: v1
kind: Pod
metadata: {name: db-2, namespace: default, labels: {app: db}}
spec: {serviceAccountName: db, containers: [{name: pg, image: pg}]}
status: {podIP: 10.1.3.12, conditions: [{type: Ready, status: "True"}]}
`)
	if !IdentitiesChanged(side, mixed, db) {
		t.Error("a db endpoint outside the mesh does not make the sidecar regenerate its mTLS cluster")
	}
	if IdentitiesChanged(gw, mixed, db) {
		t.Error("reported for the gateway, whose auto mTLS is per endpoint")
	}
	full, err := g.Class(mixed, sidecar(t, "default"), side)
	if err != nil {
		t.Fatal(err)
	}
	if ts := classCluster(t, full, ClusterName(5432, "", dbHost)).GetTransportSocket(); ts != nil {
		t.Errorf("with an endpoint outside the mesh the ORIGINAL_DST cluster keeps transport socket %v", ts)
	}
	// A replica of another account: every class verifies accounts.
	other := apply(`apiVersion: v1
kind: Pod
metadata: {name: db-2, namespace: default, labels: {app: db, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: db-backup, containers: [{name: pg, image: pg}]}
status: {podIP: 10.1.3.12, conditions: [{type: Ready, status: "True"}]}
`)
	if !IdentitiesChanged(gw, other, db) {
		t.Error("a new service account behind db not reported for the gateway")
	}
}

func TestEnvoyClusterTLS(t *testing.T) {
	port := model.Port{Name: "tcp", Port: 5432, TargetPort: "5432", Protocol: model.ProtocolTCP}
	inMesh := func(addr, sa string) *model.Endpoint {
		return &model.Endpoint{Address: addr, ServiceAccount: sa, Labels: map[string]string{TLSModeLabel: "istio"}}
	}
	outside := &model.Endpoint{Address: "10.1.0.9", ServiceAccount: "legacy"}
	svc := &model.Service{Name: "db", Namespace: "default", Hostname: dbHost, Ports: []model.Port{port}}
	external := &model.Service{
		Name: "db", Namespace: "default", Hostname: dbHost, Ports: []model.Port{port},
		Entry: &model.ServiceEntryInfo{Name: "db", Resolution: model.ResolutionStatic, External: true},
	}
	ids := []string{"spiffe://cluster.local/ns/default/sa/db"}
	two := &model.ServiceEndpoints{Endpoints: []*model.Endpoint{inMesh("10.1.0.1", "db"), inMesh("10.1.0.2", "db")}}
	mutual := func(sans ...string) *networking.ClientTLSSettings {
		return &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL, SubjectAltNames: sans}
	}
	name := ClusterName(5432, "", dbHost)
	tests := map[string]struct {
		origDst  bool
		tls      *networking.ClientTLSSettings
		svc      *model.Service
		eps      *model.ServiceEndpoints
		wantSNI  string // of the socket used for a mesh endpoint; "" for plaintext
		wantSANs []string
	}{
		"auto mTLS verifies the endpoints' service accounts": {
			eps: two, wantSNI: IstioSNI(name), wantSANs: ids,
		},
		"DestinationRule ISTIO_MUTUAL without subjectAltNames verifies them too": {
			tls: mutual(), eps: two, wantSNI: IstioSNI(name), wantSANs: ids,
		},
		"DestinationRule subjectAltNames replace them": {
			tls: mutual("spiffe://cluster.local/ns/default/sa/db-prod"), eps: two, wantSNI: IstioSNI(name),
			wantSANs: []string{"spiffe://cluster.local/ns/default/sa/db-prod"},
		},
		"DestinationRule DISABLE is plaintext, without auto mTLS": {
			tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE}, eps: two,
		},
		"a mesh-external service gets no auto mTLS": {svc: external, eps: two},
		"an ORIGINAL_DST cluster is mTLS when every endpoint runs a sidecar": {
			origDst: true, eps: two, wantSNI: IstioSNI(name), wantSANs: ids,
		},
		"an ORIGINAL_DST cluster is plaintext when one endpoint does not": {
			origDst: true, eps: &model.ServiceEndpoints{Endpoints: []*model.Endpoint{inMesh("10.1.0.1", "db"), outside}},
		},
		"an ORIGINAL_DST cluster without endpoints is plaintext": {origDst: true},
		"an ORIGINAL_DST cluster keeps the DestinationRule's ISTIO_MUTUAL whatever the endpoints": {
			origDst: true, tls: mutual(), eps: &model.ServiceEndpoints{Endpoints: []*model.Endpoint{outside}},
			wantSNI: IstioSNI(name), wantSANs: []string{"spiffe://cluster.local/ns/default/sa/legacy"},
		},
	}
	g := newForTest(quietLog())
	for tn, tc := range tests {
		t.Run(tn, func(t *testing.T) {
			s := svc
			if tc.svc != nil {
				s = tc.svc
			}
			c := edsCluster(name, port.Protocol, true)
			if tc.origDst {
				c = originalDstCluster(name, port.Protocol)
			}
			envoyClusterTLS(c, tc.tls, s, tc.eps, port, g.serviceIdentities(nil, s, tc.eps), true, nil)
			if _, err := NewResource(c.Name, ClusterType, c); err != nil {
				t.Fatalf("cluster does not validate: %v", err)
			}
			if tc.origDst && len(c.GetTransportSocketMatches()) > 0 {
				t.Error("an ORIGINAL_DST cluster has transport socket matches: its hosts carry no metadata")
			}
			sni, sans := socketSANs(t, meshSocket(c))
			if sni != tc.wantSNI || !slices.Equal(sans, tc.wantSANs) {
				t.Errorf("mesh endpoint socket: SNI %q SANs %v, want %q %v", sni, sans, tc.wantSNI, tc.wantSANs)
			}
			if !tc.origDst && tc.tls == nil {
				if sni, _ := socketSANs(t, socketFor(c, tlsModeMetadata(outside))); sni != "" {
					t.Errorf("an endpoint outside the mesh gets mTLS (SNI %q)", sni)
				}
			}
		})
	}
}

func TestAllInMesh(t *testing.T) {
	port := model.Port{Name: "tcp", Port: 5432, TargetPort: "5432"}
	ep := func(labels map[string]string, ports ...model.EndpointPort) *model.Endpoint {
		return &model.Endpoint{Address: "10.1.0.1", Labels: labels, Ports: ports}
	}
	istio := map[string]string{TLSModeLabel: "istio"}
	other := model.Port{Name: "admin", Port: 8080}
	tests := map[string]struct {
		eps  []*model.Endpoint
		port model.Port
		want bool
	}{
		"no endpoints":                  {want: false},
		"all labelled istio":            {eps: []*model.Endpoint{ep(istio), ep(istio)}, want: true},
		"one without the label":         {eps: []*model.Endpoint{ep(istio), ep(nil)}, want: false},
		"one labelled disabled":         {eps: []*model.Endpoint{ep(istio), ep(map[string]string{TLSModeLabel: "disabled"})}, want: false},
		"a custom mode counts as istio": {eps: []*model.Endpoint{ep(map[string]string{TLSModeLabel: "custom"})}, want: true},
		"endpoints that serve other ports do not count": {
			eps:  []*model.Endpoint{ep(istio, model.EndpointPort{Name: "admin", Port: 8080}), ep(nil, model.EndpointPort{Name: "tcp", Port: 5432})},
			port: other, want: true,
		},
		"none serves the port": {eps: []*model.Endpoint{ep(istio, model.EndpointPort{Name: "tcp", Port: 5432})}, port: other, want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := port
			if tc.port.Name != "" {
				p = tc.port
			}
			if got := allInMesh(&model.ServiceEndpoints{Endpoints: tc.eps}, p); got != tc.want {
				t.Errorf("allInMesh = %v, want %v", got, tc.want)
			}
		})
	}
}
