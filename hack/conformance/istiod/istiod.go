// Package istiod is the suite's oracle: Istio's own config generation,
// run in process on an Input (istio.io/istio's FakeDiscoveryServer, a fake
// Kubernetes client holding the input's objects and a memory config store
// holding its Istio configs), for every node of the input.
//
// In: a scenario.Input. Out: per node, the clusters, listeners, routes and
// endpoints istiod would send that proxy, as a dataplane.Config.
package istiod

import (
	"fmt"
	"sort"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	gwconsts "sigs.k8s.io/gateway-api/pkg/consts"
	"sigs.k8s.io/yaml"

	"istio.io/api/label"
	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/networking/grpcgen"
	"istio.io/istio/pilot/pkg/networking/util"
	labelutil "istio.io/istio/pilot/pkg/serviceregistry/util/label"
	"istio.io/istio/pilot/pkg/xds/endpoints"
	xdsfake "istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config"
	istiomesh "istio.io/istio/pkg/config/mesh"
	kubelib "istio.io/istio/pkg/kube"
	istiolog "istio.io/istio/pkg/log"
	pm "istio.io/istio/pkg/model"
	"istio.io/istio/pkg/test"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
	"github.com/meshplane/discovery/hack/conformance/scenario"
)

// created is the creation time every config gets, so that istiod orders
// configs of equal standing by namespace and name, as discovery does.
var created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Admit splits Istio objects into those Istio's validation accepts and
// those it rejects (with the reason): a rejected object never reaches a
// cluster, so neither control plane is given it.
func Admit(objs []*scenario.Object) (kept []*scenario.Object, rejected map[string]string) {
	rejected = map[string]string{}
	for _, o := range objs {
		if !o.IsIstio() {
			kept = append(kept, o)
			continue
		}
		cfgs, _, err := crd.ParseInputs(string(o.YAML()))
		switch {
		case err != nil:
			rejected[o.Key()] = err.Error()
		case len(cfgs) == 0:
			// A kind Istio does not know: neither side reads it.
			rejected[o.Key()] = "not a kind istiod reads"
		default:
			kept = append(kept, o)
		}
	}
	return kept, rejected
}

// Generate builds every node's configuration as istiod would.
func Generate(in *scenario.Input, grpcTargets []string) (map[string]*dataplane.Config, error) {
	out := map[string]*dataplane.Config{}
	err := test.Wrap(func(t test.Failer) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatal(fmt.Sprint("panic: ", r))
			}
		}()
		kube, cfgs, err := objects(in)
		if err != nil {
			t.Fatal(err)
		}
		opts := xdsfake.FakeOptions{KubernetesObjects: kube, Configs: cfgs, KubeClientModifier: gatewayAPIBundle}
		if in.Mesh != "" {
			m, err := istiomesh.ApplyMeshConfigDefaults(in.Mesh)
			if err != nil {
				t.Fatal(fmt.Errorf("MeshConfig: %w", err))
			}
			opts.MeshConfig = m
		}
		fake := xdsfake.NewFakeDiscoveryServer(t, opts)
		generated, err := generateAll(fake, in, grpcTargets)
		if err != nil {
			t.Fatal(err)
		}
		out = generated
	})
	return out, err
}

// gatewayAPIBundle makes the fake cluster's Gateway API CRDs say which
// bundle they come from, as the CRDs a user installs do: istiod reads a
// kind only from a CRD at its minimum bundle version
// (gatewayapi.MinimumCRDVersions: TLSRoute v1 from v1.5, TCPRoute v1 from
// v1.6), and the fake server creates its CRDs without the annotation, so
// without this istiod would read no TCPRoute, TLSRoute or GRPCRoute and
// every listener they serve would have no route.
func gatewayAPIBundle(c kubelib.Client) {
	fmc, ok := c.Metadata().(*metadatafake.FakeMetadataClient)
	if !ok {
		return
	}
	stamp := func(a k8stesting.Action) (bool, runtime.Object, error) {
		var obj runtime.Object
		switch a := a.(type) {
		case k8stesting.CreateAction:
			obj = a.GetObject()
		case k8stesting.UpdateAction:
			obj = a.GetObject()
		}
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok && strings.HasSuffix(m.Name, "."+scenario.GatewayAPIGroup) {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[gwconsts.BundleVersionAnnotation] = gwconsts.BundleVersion
		}
		return false, nil, nil // the tracker stores it
	}
	fmc.PrependReactor("create", "customresourcedefinitions", stamp)
	fmc.PrependReactor("update", "customresourcedefinitions", stamp)
}

// generateAll builds every node's configuration.
func generateAll(fake *xdsfake.FakeDiscoveryServer, in *scenario.Input, grpcTargets []string) (map[string]*dataplane.Config, error) {
	out := map[string]*dataplane.Config{}
	for _, n := range in.Nodes {
		p, err := proxy(fake, n)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name(), err)
		}
		if n.Kind == scenario.GRPC {
			out[n.ID] = grpcConfig(fake, p, grpcTargets)
			continue
		}
		cfg := &dataplane.Config{Listeners: fake.Listeners(p), Clusters: fake.Clusters(p)}
		cfg.Routes = fake.RoutesFromListeners(p, cfg.Listeners)
		cfg.Endpoints = fake.Endpoints(p)
		out[n.ID] = cfg
	}
	return out, nil
}

// objects turns the input into the fake Kubernetes client's objects and
// the config store's configs.
func objects(in *scenario.Input) ([]runtime.Object, []config.Config, error) {
	dec := kubelib.IstioCodec.UniversalDeserializer()
	var kube []runtime.Object
	for _, o := range in.KubeObjects() {
		js, err := yaml.YAMLToJSON(servedVersion(o).YAML())
		if err != nil {
			return nil, nil, err
		}
		obj, _, err := dec.Decode(js, nil, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", o.Key(), err)
		}
		kube = append(kube, obj)
	}
	var cfgs []config.Config
	for _, o := range in.IstioObjects() {
		parsed, _, err := crd.ParseInputs(string(o.YAML()))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", o.Key(), err)
		}
		for _, c := range parsed {
			c.CreationTimestamp = created
			// As the Kubernetes config client does: short host names resolve
			// against the cluster's domain.
			c.Domain = "cluster.local"
			cfgs = append(cfgs, c)
		}
	}
	return kube, cfgs, nil
}

// servedVersion is o as istiod reads it. A ReferenceGrant written at v1 is
// read by istiod at v1beta1 (its informer's version): a real API server
// serves the CRD at both, the fake client only at the version the object
// was stored with, so istiod would see no grant at all.
func servedVersion(o *scenario.Object) *scenario.Object {
	if o.Kind != "ReferenceGrant" || o.APIVersion != scenario.GatewayAPIGroup+"/v1" {
		return o
	}
	v := *o
	v.APIVersion = scenario.GatewayAPIGroup + "/v1beta1"
	v.Doc = map[string]any{}
	for k, val := range o.Doc {
		v.Doc[k] = val
	}
	v.Doc["apiVersion"] = v.APIVersion
	return &v
}

// proxy initialises a proxy as istiod's ADS server does when the node
// connects (initProxyMetadata, initializeProxy, computeProxyState).
func proxy(fake *xdsfake.FakeDiscoveryServer, n *scenario.Node) (*model.Proxy, error) {
	md, err := structpb.NewStruct(n.Meta)
	if err != nil {
		return nil, err
	}
	meta, err := model.ParseMetadata(md)
	if err != nil {
		return nil, err
	}
	p, err := model.ParseServiceNodeWithMetadata(n.ID, meta)
	if err != nil {
		return nil, err
	}
	p.ConfigNamespace = model.GetProxyConfigNamespace(p)
	p.XdsNode = &corev3.Node{Id: n.ID, Metadata: md}
	if n.Locality != (scenario.Locality{}) {
		p.XdsNode.Locality = &corev3.Locality{Region: n.Locality.Region, Zone: n.Locality.Zone, SubZone: n.Locality.SubZone}
	}
	env := fake.Env()
	push := fake.PushContext()
	p.SetWorkloadLabels(env)
	setTopologyLabels(p)
	p.SetServiceTargets(env.ServiceDiscovery)
	p.SetSidecarScope(push)
	p.SetGatewaysForProxy(push)
	p.DiscoverIPMode()
	p.LastPushContext = push
	if p.Metadata.Generator != "" {
		p.XdsResourceGenerator = fake.Discovery.Generators[p.Metadata.Generator]
	}
	return p, nil
}

// setTopologyLabels is istiod's (pilot/pkg/xds/ads.go, unexported
// there): the proxy's locality from its labels (the registry adds its
// pod's locality to them), else its locality label, else the xDS node's;
// then the topology labels added to its labels.
func setTopologyLabels(p *model.Proxy) {
	p.Locality = localityFromProxyLabels(p)
	if p.Locality == nil {
		p.Locality = &corev3.Locality{
			Region:  p.XdsNode.Locality.GetRegion(),
			Zone:    p.XdsNode.Locality.GetZone(),
			SubZone: p.XdsNode.Locality.GetSubZone(),
		}
	}
	p.Labels = labelutil.AugmentLabels(p.Labels, p.Metadata.ClusterID, util.LocalityToString(p.Locality), p.GetNodeName(), p.Metadata.Network)
}

func localityFromProxyLabels(p *model.Proxy) *corev3.Locality {
	region, f1 := p.Labels[labelutil.LabelTopologyRegion]
	zone, f2 := p.Labels[labelutil.LabelTopologyZone]
	subzone, f3 := p.Labels[label.TopologySubzone.Name]
	if !f1 && !f2 && !f3 {
		if l := pm.GetLocalityLabel(p.Labels); l != "" {
			return util.ConvertLocality(l)
		}
		return nil
	}
	return &corev3.Locality{Region: region, Zone: zone, SubZone: subzone}
}

// grpcConfig asks istiod's proxyless gRPC generator for what a gRPC client
// dialing each target would fetch: the target's Listener, the routes it
// names, the clusters those name and their endpoints.
func grpcConfig(fake *xdsfake.FakeDiscoveryServer, p *model.Proxy, targets []string) *dataplane.Config {
	push := fake.PushContext()
	gen := grpcGenerator(fake)
	cfg := &dataplane.Config{}
	cfg.Listeners = unmarshalAll[listenerv3.Listener](gen.BuildListeners(p, push, targets))
	cfg.Routes = unmarshalAll[routev3.RouteConfiguration](gen.BuildHTTPRoutes(p, push, dataplane.RouteNames(cfg.Listeners)))
	cfg.Clusters = unmarshalAll[clusterv3.Cluster](gen.BuildClusters(p, push, dataplane.ClusterNames(cfg.Routes)))
	for _, c := range cfg.Clusters {
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		b := endpoints.NewEndpointBuilder(name, p, push)
		cla := b.BuildClusterLoadAssignment(fake.Discovery.Env.EndpointIndex)
		if cla != nil {
			cfg.Endpoints = append(cfg.Endpoints, cla)
		}
	}
	sort.Slice(cfg.Endpoints, func(i, j int) bool { return cfg.Endpoints[i].ClusterName < cfg.Endpoints[j].ClusterName })
	return cfg
}

func grpcGenerator(fake *xdsfake.FakeDiscoveryServer) *grpcgen.GrpcConfigGenerator {
	if g, ok := fake.Discovery.Generators["grpc"].(*grpcgen.GrpcConfigGenerator); ok {
		return g
	}
	return &grpcgen.GrpcConfigGenerator{}
}

// unmarshalAll decodes generated resources of one type, in name order.
func unmarshalAll[T any, PT interface {
	*T
	proto.Message
}](rs model.Resources) []PT {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
	out := make([]PT, 0, len(rs))
	for _, r := range rs {
		m := PT(new(T))
		if err := r.Resource.UnmarshalTo(m); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// Quiet turns Istio's logging off: the oracle's own log lines are noise
// in a test's output. Call it once, before Generate.
func Quiet() error {
	o := istiolog.DefaultOptions()
	o.SetDefaultOutputLevel(istiolog.OverrideScopeName, istiolog.NoneLevel)
	return istiolog.Configure(o)
}
