package inject

import (
	"encoding/json"
	"net/http"
	"time"
)

// debugView is what /debug/inject shows.
type debugView struct {
	Source               string            `json:"source"`
	LoadedAt             time.Time         `json:"loadedAt"`
	Revision             string            `json:"revision"`
	Tags                 []string          `json:"tags,omitempty"`
	Default              bool              `json:"default"`
	ConfigMap            string            `json:"configMap"`
	Synced               bool              `json:"synced"`
	Policy               Policy            `json:"policy"`
	DefaultTemplates     []string          `json:"defaultTemplates"`
	Templates            map[string]string `json:"templates"`
	AlwaysInjectSelector any               `json:"alwaysInjectSelector,omitempty"`
	NeverInjectSelector  any               `json:"neverInjectSelector,omitempty"`
	InjectedAnnotations  map[string]string `json:"injectedAnnotations,omitempty"`
	Values               Values            `json:"values"`
	LastError            string            `json:"lastError,omitempty"`
	LastErrorAt          *time.Time        `json:"lastErrorAt,omitempty"`
}

// RegisterDebug serves /debug/inject: the injection configuration in
// force, where it came from, and the last refused configuration's error.
func (i *Injector) RegisterDebug(mux *http.ServeMux) {
	mux.HandleFunc("/debug/inject", i.serveDebug)
}

func (i *Injector) serveDebug(w http.ResponseWriter, _ *http.Request) {
	snap := i.snap.Load()
	sel := i.Selection()
	v := debugView{
		Tags: sel.Tags, Default: sel.IsDefault(),
		Source: snap.Source, LoadedAt: snap.LoadedAt, Revision: revisionName(i.opts.Revision),
		ConfigMap: i.opts.Namespace + "/" + i.opts.ConfigMapName(), Synced: i.HasSynced(),
		Policy: snap.Config.Policy, DefaultTemplates: snap.Config.DefaultTemplates,
		Templates: snap.Config.Templates, InjectedAnnotations: snap.Config.InjectedAnnotations,
		Values: snap.Values,
	}
	if len(snap.Config.AlwaysInjectSelector) > 0 {
		v.AlwaysInjectSelector = snap.Config.AlwaysInjectSelector
	}
	if len(snap.Config.NeverInjectSelector) > 0 {
		v.NeverInjectSelector = snap.Config.NeverInjectSelector
	}
	i.mu.Lock()
	if i.lastError != "" {
		v.LastError = i.lastError
		at := i.lastErrorAt
		v.LastErrorAt = &at
	}
	i.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		i.log.Debug("write /debug/inject", "err", err)
	}
}
