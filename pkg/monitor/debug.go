package monitor

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/meshplane/discovery/pkg/model"
)

// registryEntry is one service in /debug/registryz: discovery's Service
// with its endpoints, and the keys of istiod's model.Service that Kiali
// and other readers of istiod's registryz use.
type registryEntry struct {
	*model.Service
	Endpoints []*model.Endpoint `json:"endpoints"`

	Attributes     serviceAttributes `json:"Attributes"`
	ClusterVIPs    clusterVIPs       `json:"clusterVIPs"`
	DefaultAddress string            `json:"defaultAddress,omitempty"`
	Resolution     int               `json:"Resolution"`
	MeshExternal   bool              `json:"MeshExternal"`
}

// serviceAttributes are istiod's ServiceAttributes: the registry
// ("Kubernetes", or "External" for a ServiceEntry), name, namespace,
// labels, exportTo as a set and the selector.
type serviceAttributes struct {
	ServiceRegistry string
	Name            string
	Namespace       string
	Labels          map[string]string
	ExportTo        map[string]struct{}
	LabelSelectors  map[string]string
}

// clusterVIPs is istiod's AddressMap: addresses by cluster.
type clusterVIPs struct {
	Addresses map[string][]string `json:"Addresses"`
}

// Istio's service resolutions (model.Resolution), as registryz numbers
// them.
const (
	resolutionClientSideLB    = 0
	resolutionDNSLB           = 1
	resolutionPassthrough     = 2
	resolutionDNSRoundRobinLB = 3
)

// clusterID names the one cluster discovery reads, as Istio's default
// cluster ID does.
const clusterID = "Kubernetes"

func newRegistryEntry(s *model.Service, eps []*model.Endpoint) registryEntry {
	e := registryEntry{Service: s, Endpoints: eps}
	e.Attributes = serviceAttributes{
		ServiceRegistry: "Kubernetes", Name: s.Name, Namespace: s.Namespace,
		Labels: s.Labels, LabelSelectors: s.Selector,
	}
	if len(s.ExportTo) > 0 {
		e.Attributes.ExportTo = map[string]struct{}{}
		for _, x := range s.ExportTo {
			e.Attributes.ExportTo[x] = struct{}{}
		}
	}
	e.ClusterVIPs.Addresses = map[string][]string{}
	if len(s.Addresses) > 0 {
		e.ClusterVIPs.Addresses[clusterID] = s.Addresses
		e.DefaultAddress = s.Addresses[0]
	}
	switch {
	case s.Entry != nil:
		e.Attributes.ServiceRegistry = "External"
		e.Attributes.Name = s.Hostname
		e.MeshExternal = s.Entry.External
		switch s.Entry.Resolution {
		case "DNS":
			e.Resolution = resolutionDNSLB
		case "DNS_ROUND_ROBIN":
			e.Resolution = resolutionDNSRoundRobinLB
		case "NONE":
			e.Resolution = resolutionPassthrough
		}
	case s.Headless:
		e.Resolution = resolutionPassthrough
	default:
		e.Resolution = resolutionClientSideLB
	}
	return e
}

// RegistryzHandler serves /debug/registryz: every Service of the current
// World with its endpoints, as a JSON array in the shape of istiod's (with
// discovery's own keys besides). The World's version is the header
// X-Discovery-World-Version.
func RegistryzHandler(world func() *model.World) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		wd := world()
		svcs := wd.Services()
		out := make([]registryEntry, 0, len(svcs))
		for _, s := range svcs {
			eps := []*model.Endpoint{}
			if e := wd.Endpoints(s.Namespace, s.Name); e != nil {
				eps = e.Endpoints
			}
			out = append(out, newRegistryEntry(s, eps))
		}
		w.Header().Set(worldVersionHeader, strconv.FormatUint(wd.Version, 10))
		writeJSON(w, out)
	})
}

// worldVersionHeader carries the World version a debug answer was read
// from.
const worldVersionHeader = "X-Discovery-World-Version"

// ConfigNote adds one entry to a config's object in /debug/configz: a
// key beside apiVersion, kind, metadata, spec and status, and its value.
// ok false adds nothing.
type ConfigNote func(c *model.Config) (key string, value any, ok bool)

// ConfigzHandler serves /debug/configz: every Istio config of the current
// World as a JSON array of Kubernetes objects (apiVersion, kind, metadata,
// spec, status), as istiod's is, with what notes add to each as further
// keys (such as what discovery ignores of it). ?kind=VirtualService limits
// it to one kind. The World's version is the header
// X-Discovery-World-Version.
func ConfigzHandler(world func() *model.World, notes ...ConfigNote) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wd := world()
		only := model.Kind(r.URL.Query().Get("kind"))
		out := []any{}
		for _, k := range model.CRDKinds {
			if only != "" && k != only {
				continue
			}
			gvk := k.GroupVersionKind()
			for _, c := range wd.Configs(k) {
				e := withTypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Object: c.Object}
				if c.Derived {
					e.note("derived", true)
				}
				if r := wd.GatewayAPIReport(c.Key); r != nil {
					e.note("translation", r)
				}
				for _, note := range notes {
					if key, v, ok := note(c); ok {
						if e.Notes == nil {
							e.Notes = map[string]any{}
						}
						e.Notes[key] = v
					}
				}
				out = append(out, e)
			}
		}
		w.Header().Set(worldVersionHeader, strconv.FormatUint(wd.Version, 10))
		writeJSON(w, out)
	})
}

func (e *withTypeMeta) note(key string, v any) {
	if e.Notes == nil {
		e.Notes = map[string]any{}
	}
	e.Notes[key] = v
}

// withTypeMeta adds apiVersion and kind, which informers leave empty, and
// the notes.
type withTypeMeta struct {
	APIVersion string
	Kind       string
	Object     any
	Notes      map[string]any
}

func (t withTypeMeta) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(t.Object)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range t.Notes {
		if m[k], err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	m["apiVersion"], _ = json.Marshal(t.APIVersion)
	m["kind"], _ = json.Marshal(t.Kind)
	return json.Marshal(m)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// VersionHandler answers with version as text: istiod's /version, which
// istioctl version reads from the monitoring port as
// <version>-<revision>-<status>.
func VersionHandler(version string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(version))
	})
}
