package meshconfig

import (
	"encoding/json"
	"net/http"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshplane/discovery/pkg/mesh"
)

// Status is what /debug/meshz shows.
type Status struct {
	// Source says where the MeshConfig in force was read.
	Source string    `json:"source"`
	Since  time.Time `json:"since"`
	Hash   string    `json:"hash"`
	// MeshConfig is the MeshConfig in force, Istio's defaults included.
	MeshConfig json.RawMessage `json:"meshConfig"`
	// Ignored are the fields it sets that discovery does not apply.
	Ignored  []mesh.Field `json:"ignored"`
	Warnings []string     `json:"warnings,omitempty"`
	// Refused is the last MeshConfig refused since the one in force was
	// read, if any.
	Refused *Refusal `json:"refused,omitempty"`
	// Shadowed names a source that is not read because another wins.
	Shadowed   string `json:"shadowed,omitempty"`
	Precedence string `json:"precedence"`
	// Applied lists the fields discovery acts on, and how.
	Applied map[string]string `json:"applied"`
}

const precedence = "--mesh-config file if given, else the ConfigMap, else Istio's defaults; " +
	"the trust domain: --trust-domain if given on the command line, else the MeshConfig's trustDomain read at start-up"

// Status returns the MeshConfig in force and what was reported of it.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	st, refused, cm := w.inForce, w.refused, w.configMap
	w.mu.Unlock()
	js, err := protojson.Marshal(st.cfg.Proto())
	if err != nil {
		js = []byte(`null`)
	}
	out := Status{
		Source: st.source, Since: st.since, Hash: st.cfg.Hash(), MeshConfig: js,
		Ignored: st.ignored, Warnings: st.cfg.Warnings(), Refused: refused,
		Precedence: precedence, Applied: mesh.Applied,
	}
	if out.Ignored == nil {
		out.Ignored = []mesh.Field{}
	}
	if w.opts.File != "" && cm != nil {
		out.Shadowed = cm.source + " (--mesh-config is given)"
	}
	return out
}

// Handler serves /debug/meshz.
func (w *Watcher) Handler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(w.Status())
	})
}
