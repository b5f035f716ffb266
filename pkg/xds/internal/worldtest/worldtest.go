// Package worldtest builds Worlds for the xds tests and benchmarks: from
// YAML (the kinds model.Scheme knows) or synthetically, at scale.
package worldtest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/meshplane/discovery/pkg/mesh"
	"github.com/meshplane/discovery/pkg/model"
)

// Decode turns a multi-document YAML stream into upsert Events.
func Decode(data []byte) ([]model.Event, error) {
	dec := serializer.NewCodecFactory(model.Scheme()).UniversalDeserializer()
	var out []model.Event
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if string(js) == "null" {
			continue
		}
		obj, gvk, err := dec.Decode(js, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		kind, err := model.KindFor(*gvk)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		acc, err := meta.Accessor(obj)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, model.Event{Op: model.OpUpsert, Key: model.Key{Kind: kind, Namespace: acc.GetNamespace(), Name: acc.GetName()}, Object: obj})
	}
	return out, nil
}

// LoadFile applies the YAML file at path to a new Store.
func LoadFile(path string) (*model.Store, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	evs, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if evs, err = withMesh(evs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := model.NewStore(model.StoreOptions{})
	if _, err := s.Apply(evs...); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// withMesh turns the istio ConfigMap of istio-system, if the events hold
// one, into the MeshConfig, and other ConfigMaps into CA ConfigMaps, as
// the server's MeshConfig watcher does.
func withMesh(evs []model.Event) ([]model.Event, error) {
	for i, ev := range evs {
		if ev.Key.Kind != model.KindConfigMap {
			continue
		}
		if ev.Key.Namespace != "istio-system" || ev.Key.Name != "istio" {
			evs[i].Key.Kind = model.KindCAConfigMap // as the watcher passes it on
			continue
		}
		cfg, err := mesh.Parse(ev.Object.(*corev1.ConfigMap).Data["mesh"])
		if err != nil {
			return nil, err
		}
		evs[i] = model.Event{Op: model.OpUpsert, Key: model.MeshKey, Object: &model.MeshObject{Config: cfg, Source: "test"}}
	}
	return evs, nil
}

// MeshConfig returns the event that puts the MeshConfig text in force.
func MeshConfig(text string) (model.Event, error) {
	cfg, err := mesh.Parse(text)
	if err != nil {
		return model.Event{}, err
	}
	return model.Event{Op: model.OpUpsert, Key: model.MeshKey, Object: &model.MeshObject{Config: cfg, Source: "test"}}, nil
}

// Service returns a ClusterIP Service event with an http port 80 and a grpc
// port 7070.
func Service(ns, name, ip string) model.Event {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP: ip, ClusterIPs: []string{ip}, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "grpc", Port: 7070, TargetPort: intstr.FromInt32(7070)},
			},
		},
	}
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindService, Namespace: ns, Name: name}, Object: svc}
}

// Slice returns an EndpointSlice event for the Service ns/name with the
// given ready addresses serving ports http (8080) and grpc (7070).
func Slice(ns, name string, addrs ...string) model.Event {
	return SliceWithPorts(ns, name, map[string]int32{"http": 8080, "grpc": 7070}, addrs...)
}

// SliceWithPorts is Slice with the named ports given.
func SliceWithPorts(ns, name string, ports map[string]int32, addrs ...string) model.Event {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for pn, p := range ports {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr(pn), Port: ptr(p)})
	}
	zone := "zone-a"
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}, Zone: &zone,
		})
	}
	return model.Event{Op: model.OpUpsert, Key: model.Key{Kind: model.KindEndpointSlice, Namespace: ns, Name: es.Name}, Object: es}
}

// Mesh returns the events of n services spread over namespaces ns-0 ..
// ns-(namespaces-1), each with endpointsPer endpoints.
func Mesh(n, namespaces, endpointsPer int) []model.Event {
	var out []model.Event
	for i := 0; i < n; i++ {
		ns := "ns-" + strconv.Itoa(i%namespaces)
		name := "svc-" + strconv.Itoa(i)
		out = append(out, Service(ns, name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)))
		addrs := make([]string, endpointsPer)
		for j := range addrs {
			addrs[j] = fmt.Sprintf("10.%d.%d.%d", 1+i/250, i%250, j+1)
		}
		out = append(out, Slice(ns, name, addrs...))
	}
	return out
}

func ptr[T any](v T) *T { return &v }
