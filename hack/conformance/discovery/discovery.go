// Package discovery runs discovery's own generator (pkg/xds/gen) on an
// Input: the objects go through the same Store the file and Kubernetes
// sources feed, and each node's configuration is what the xDS server
// would send it.
//
// In: a scenario.Input. Out: per node, a dataplane.Config; per object,
// the fields discovery reports it does not support.
package discovery

import (
	"fmt"
	"io"
	"log/slog"
	"reflect"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
	"github.com/meshplane/discovery/hack/conformance/scenario"
	"github.com/meshplane/discovery/pkg/mesh"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Result is discovery's view of one input.
type Result struct {
	// Configs holds each node's configuration, by node ID.
	Configs map[string]*dataplane.Config
	// Unsupported lists, per object key, the fields discovery reports it
	// ignores or refuses (gen.UnsupportedFields, gen.EnvoyRefusals) and
	// the kinds it does not read at all.
	Unsupported map[string][]string
}

// Generate builds every node's configuration as discovery would.
func Generate(in *scenario.Input) (*Result, error) { return GenerateWith(in, Options{}) }

// Options are the generator's settings that change the shape of what it
// sends, not its behaviour.
type Options struct {
	// ListenersPerAddress is gen.Options.ListenersPerAddress.
	ListenersPerAddress bool
}

// GenerateWith is Generate with the generator set by o.
func GenerateWith(in *scenario.Input, opts Options) (*Result, error) {
	res := &Result{Configs: map[string]*dataplane.Config{}, Unsupported: map[string][]string{}}
	dec := serializer.NewCodecFactory(model.Scheme()).UniversalDeserializer()
	var events []model.Event
	for _, o := range in.Objects {
		js, err := yaml.YAMLToJSON(o.YAML())
		if err != nil {
			return nil, err
		}
		obj, gvk, err := dec.Decode(js, nil, nil)
		if err != nil {
			if o.IsIstio() {
				res.Unsupported[o.Key()] = append(res.Unsupported[o.Key()], "kind not read by discovery")
				continue
			}
			return nil, fmt.Errorf("%s: %w", o.Key(), err)
		}
		kind, err := model.KindFor(*gvk)
		if err != nil {
			if o.IsIstio() {
				res.Unsupported[o.Key()] = append(res.Unsupported[o.Key()], "kind not read by discovery")
			}
			// Kubernetes kinds discovery does not watch carry nothing
			// it needs.
			continue
		}
		if kind.IsIstio() {
			res.Unsupported[o.Key()] = append(res.Unsupported[o.Key()], unsupported(kind, obj)...)
		}
		events = append(events, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: kind, Namespace: o.Namespace, Name: o.Name}, Object: obj})
	}
	if in.Mesh != "" {
		// As the MeshConfig watcher hands the istio ConfigMap over.
		cfg, err := mesh.Parse(in.Mesh)
		if err != nil {
			return nil, fmt.Errorf("MeshConfig: %w", err)
		}
		for _, f := range cfg.Ignored() {
			res.Unsupported["MeshConfig"] = append(res.Unsupported["MeshConfig"], "not applied: "+f.Path)
		}
		events = append(events, model.Event{Op: model.OpUpsert, Key: model.MeshKey, Object: &model.MeshObject{Config: cfg, Source: "conformance"}})
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(events...); err != nil {
		return nil, err
	}
	w := store.World()
	// In a cluster the server serves gateway credentials and the
	// generator refers to them (server.Options.Credentials).
	o := gen.DefaultOptions(slog.New(slog.NewTextHandler(io.Discard, nil)))
	o.Credentials = true
	o.ListenersPerAddress = opts.ListenersPerAddress
	g, err := gen.New(o)
	if err != nil {
		return nil, err
	}
	for _, n := range in.Nodes {
		p, err := model.ParseProxy(n.ID, n.Meta)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name(), err)
		}
		// As the server's parseNode reads the xDS node.
		p.NodeLocality = model.Locality{Region: n.Locality.Region, Zone: n.Locality.Zone, Subzone: n.Locality.SubZone}
		cc, err := g.Class(w, p, nil)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name(), err)
		}
		cfg, err := config(g.Proxy(w, p, cc))
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name(), err)
		}
		res.Configs[n.ID] = cfg
	}
	for k, v := range res.Unsupported {
		if len(v) == 0 {
			delete(res.Unsupported, k)
		}
	}
	return res, nil
}

// unsupported lists what discovery reports of an Istio object's spec.
func unsupported(kind model.Kind, obj runtime.Object) []string {
	if !gen.ReadsKind(kind) {
		return []string{"kind not read by discovery"}
	}
	spec := specOf(obj)
	if spec == nil {
		return nil
	}
	out := gen.UnsupportedFields(kind, spec)
	for _, r := range gen.EnvoyRefusals(kind, spec) {
		out = append(out, "refused: "+r)
	}
	return out
}

// specOf returns the Spec field of an Istio client-go object.
func specOf(obj runtime.Object) proto.Message {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName("Spec")
	if !f.IsValid() || !f.CanAddr() {
		return nil
	}
	m, _ := f.Addr().Interface().(proto.Message)
	return m
}

func config(pc *gen.ProxyConfig) (*dataplane.Config, error) {
	cfg := &dataplane.Config{}
	for _, typeURL := range []string{gen.ListenerType, gen.ClusterType, gen.RouteType, gen.EndpointType} {
		for _, name := range pc.Names(typeURL) {
			m, err := pc.Get(typeURL, name).Any.UnmarshalNew()
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", gen.ShortType(typeURL), name, err)
			}
			switch x := m.(type) {
			case *listenerv3.Listener:
				cfg.Listeners = append(cfg.Listeners, x)
			case *clusterv3.Cluster:
				cfg.Clusters = append(cfg.Clusters, x)
			case *routev3.RouteConfiguration:
				cfg.Routes = append(cfg.Routes, x)
			case *endpointv3.ClusterLoadAssignment:
				cfg.Endpoints = append(cfg.Endpoints, x)
			}
		}
	}
	return cfg, nil
}
