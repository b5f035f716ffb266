package monitor

import (
	"encoding/json"
	"net/http"

	"github.com/meshplane/discovery/pkg/model"
)

// registryEntry is one service in /debug/registryz.
type registryEntry struct {
	*model.Service
	Endpoints []*model.Endpoint `json:"endpoints"`
}

// RegistryzHandler serves /debug/registryz: every Service of the current
// World with its endpoints, as JSON.
func RegistryzHandler(world func() *model.World) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		wd := world()
		svcs := wd.Services()
		out := struct {
			Version  uint64          `json:"version"`
			Services []registryEntry `json:"services"`
		}{Version: wd.Version, Services: make([]registryEntry, 0, len(svcs))}
		for _, s := range svcs {
			e := registryEntry{Service: s, Endpoints: []*model.Endpoint{}}
			if eps := wd.Endpoints(s.Namespace, s.Name); eps != nil {
				e.Endpoints = eps.Endpoints
			}
			out.Services = append(out.Services, e)
		}
		writeJSON(w, out)
	})
}

// ConfigNote adds one entry to a config's object in /debug/configz: a
// key beside apiVersion, kind, metadata, spec and status, and its value.
// ok false adds nothing.
type ConfigNote func(c *model.Config) (key string, value any, ok bool)

// ConfigzHandler serves /debug/configz: every Istio config of the current
// World as JSON objects with apiVersion and kind, and what notes add to
// each (such as what discovery ignores of it). ?kind=VirtualService limits
// it to one kind.
func ConfigzHandler(world func() *model.World, notes ...ConfigNote) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wd := world()
		only := model.Kind(r.URL.Query().Get("kind"))
		out := struct {
			Version uint64 `json:"version"`
			Configs []any  `json:"configs"`
		}{Version: wd.Version, Configs: []any{}}
		for _, k := range model.IstioKinds {
			if only != "" && k != only {
				continue
			}
			gvk := k.GroupVersionKind()
			for _, c := range wd.Configs(k) {
				e := withTypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Object: c.Object}
				for _, note := range notes {
					if key, v, ok := note(c); ok {
						if e.Notes == nil {
							e.Notes = map[string]any{}
						}
						e.Notes[key] = v
					}
				}
				out.Configs = append(out.Configs, e)
			}
		}
		writeJSON(w, out)
	})
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
