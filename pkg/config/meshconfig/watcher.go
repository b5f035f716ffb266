// Package meshconfig keeps the mesh's MeshConfig in force.
//
// In: the mesh's ConfigMap (istio, or istio-<revision>, in the control
// plane's namespace; key "mesh"), as the Kubernetes source or a config
// directory hands it over in KindConfigMap events, and the --mesh-config
// file (FileSource).
//
// Out: KindMeshConfig events to the Store, with the MeshConfig parsed and
// checked (pkg/mesh); an invalid one is refused, logged and counted, and
// the last good one stays in force. /debug/meshz shows the MeshConfig in
// force, where it came from, the fields it sets that discovery does not
// apply, and the last refusal.
//
// Precedence, as istiod's: the --mesh-config file when given (the
// ConfigMap is then not read, and /debug/meshz says so), else the
// ConfigMap, else Istio's defaults. A deleted ConfigMap, or one without
// the "mesh" key, brings back Istio's defaults; a --mesh-config file that
// goes away keeps the MeshConfig last read from it.
package meshconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshplane/discovery/pkg/config"
	"github.com/meshplane/discovery/pkg/mesh"
	"github.com/meshplane/discovery/pkg/model"
)

// ConfigMapKey is the ConfigMap key that holds the MeshConfig.
const ConfigMapKey = "mesh"

// Options configure the Watcher. Namespace, Revision and the trust domain
// fields are the control plane's, set by the wiring; File has a flag.
type Options struct {
	// Namespace holds the mesh's ConfigMap.
	Namespace string
	// Revision names the ConfigMap: istio-<revision>, or istio for the
	// default revision.
	Revision string
	// File is --mesh-config: a MeshConfig file that, when given, is the
	// MeshConfig (watched), and the ConfigMap is not read.
	File string
	// TrustDomain is the trust domain in force (decided at start-up) and
	// TrustDomainFlag says whether --trust-domain set it: a MeshConfig
	// whose trustDomain differs is reported.
	TrustDomain     string
	TrustDomainFlag bool
}

// AddFlags registers --mesh-config.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.File, "mesh-config", o.File,
		"Istio MeshConfig file (YAML), watched; when given, the istio ConfigMap is not read")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.Namespace == "" {
		return errors.New("mesh config: the control plane namespace is not set")
	}
	return nil
}

// ConfigMapName is istio, or istio-<revision> for a revision other than
// default, as istiod names it.
func (o *Options) ConfigMapName() string {
	if o.Revision == "" || o.Revision == "default" {
		return "istio"
	}
	return "istio-" + o.Revision
}

// Watcher keeps the MeshConfig in force. It is a config.Sink in front of
// the Store: sources hand it everything, it turns the mesh's ConfigMap
// into the MeshConfig and passes every other event through.
type Watcher struct {
	opts    Options
	next    config.Sink
	log     *slog.Logger
	metrics *metrics

	// applyMu orders the batches that carry a MeshConfig, so that the
	// Store never receives an older one after a newer one.
	applyMu sync.Mutex

	mu        sync.Mutex
	configMap *input // last seen ConfigMap, or nil
	file      *input // last seen --mesh-config content, or nil
	inForce   *state
	refused   *Refusal
}

// input is what one source last said: the text, or absent.
type input struct {
	source  string
	text    string
	present bool
}

// state is the MeshConfig in force and what was reported of it.
type state struct {
	cfg     *mesh.Config
	source  string
	since   time.Time
	ignored []mesh.Field
}

// Refusal is the last MeshConfig that was refused.
type Refusal struct {
	Source string    `json:"source"`
	Error  string    `json:"error"`
	At     time.Time `json:"at"`
}

var _ config.Sink = (*Watcher)(nil)

// New returns a Watcher that hands events on to next, with Istio's
// defaults in force until a MeshConfig is read.
func New(opts Options, next config.Sink, log *slog.Logger, reg prometheus.Registerer) (*Watcher, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("mesh config metrics: %w", err)
	}
	w := &Watcher{opts: opts, next: next, log: log.With("component", "meshconfig"), metrics: m}
	w.inForce = &state{cfg: mesh.Default(), source: "defaults", since: time.Now()}
	w.report(w.inForce)
	return w, nil
}

// Current is the MeshConfig in force.
func (w *Watcher) Current() *mesh.Config {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inForce.cfg
}

// Apply hands events to the next Sink. The mesh's ConfigMap becomes a
// KindMeshConfig event, first in the batch; other ConfigMaps (a config
// directory's) go on as KindCAConfigMap events, for the CA certificates
// BackendTLSPolicies name.
func (w *Watcher) Apply(events ...model.Event) (*model.Update, error) {
	pass := make([]model.Event, 0, len(events))
	var cms []model.Event
	for _, ev := range events {
		switch {
		case ev.Key.Kind != model.KindConfigMap:
			pass = append(pass, ev)
		case ev.Key.Namespace == w.opts.Namespace && ev.Key.Name == w.opts.ConfigMapName():
			cms = append(cms, ev)
		default:
			ev.Key.Kind = model.KindCAConfigMap
			pass = append(pass, ev)
		}
	}
	if len(cms) == 0 {
		if len(pass) == 0 {
			return nil, nil
		}
		return w.next.Apply(pass...)
	}
	w.applyMu.Lock()
	defer w.applyMu.Unlock()
	var meshEv *model.Event
	for _, ev := range cms {
		if e := w.takeConfigMap(ev); e != nil {
			meshEv = e
		}
	}
	if meshEv != nil {
		pass = append([]model.Event{*meshEv}, pass...)
	}
	if len(pass) == 0 {
		return nil, nil
	}
	return w.next.Apply(pass...)
}

// SetFile hands over the --mesh-config file's content (present false: the
// file is gone) and applies it.
func (w *Watcher) SetFile(text string, present bool) error {
	w.applyMu.Lock()
	defer w.applyMu.Unlock()
	w.mu.Lock()
	in := &input{source: "file " + w.opts.File, text: text, present: present}
	if !present && w.file != nil {
		// Keep what was last read from it.
		w.mu.Unlock()
		w.log.Warn("--mesh-config file is gone; the MeshConfig last read from it stays in force", "file", w.opts.File)
		return nil
	}
	w.file = in
	w.mu.Unlock()
	ev := w.evaluate(in)
	if ev == nil {
		return nil
	}
	_, err := w.next.Apply(*ev)
	return err
}

// Seed puts a MeshConfig read before the sources start (ReadInitial) in
// force, so that the first World already has it.
func (w *Watcher) Seed(text, source string) error {
	w.applyMu.Lock()
	defer w.applyMu.Unlock()
	ev := w.evaluate(&input{source: source, text: text, present: true})
	if ev == nil {
		return nil
	}
	_, err := w.next.Apply(*ev)
	return err
}

// takeConfigMap records the ConfigMap and, unless --mesh-config shadows
// it, returns the MeshConfig event it gives (nil: nothing changes).
func (w *Watcher) takeConfigMap(ev model.Event) *model.Event {
	in := &input{source: fmt.Sprintf("ConfigMap %s/%s", ev.Key.Namespace, ev.Key.Name)}
	if ev.Op == model.OpUpsert {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok {
			w.log.Error("mesh ConfigMap event with the wrong type", "type", fmt.Sprintf("%T", ev.Object))
			return nil
		}
		in.text, in.present = cm.Data[ConfigMapKey]
		if cm.ResourceVersion != "" {
			in.source += " (resourceVersion " + cm.ResourceVersion + ")"
		}
	}
	w.mu.Lock()
	w.configMap = in
	shadowed := w.opts.File != ""
	w.mu.Unlock()
	if shadowed {
		w.log.Info("mesh ConfigMap not read: --mesh-config is given", "configMap", in.source)
		return nil
	}
	return w.evaluate(in)
}

// evaluate parses in and, if it is valid and differs from the MeshConfig
// in force, puts it in force and returns its event. An invalid one is
// logged, counted and kept out.
func (w *Watcher) evaluate(in *input) *model.Event {
	text := ""
	if in.present {
		text = in.text
	}
	cfg, err := mesh.Parse(text)
	if err != nil {
		w.mu.Lock()
		w.refused = &Refusal{Source: in.source, Error: err.Error(), At: time.Now()}
		inForce := w.inForce.source
		w.mu.Unlock()
		w.metrics.reloads.WithLabelValues("invalid").Inc()
		w.metrics.invalid.Set(1)
		w.log.Error("MeshConfig refused; the last good one stays in force", "source", in.source, "error", err.Error(), "inForce", inForce)
		return nil
	}
	w.metrics.invalid.Set(0)
	source := in.source
	if !in.present {
		source = in.source + ": no " + ConfigMapKey + " key or gone; Istio's defaults"
	}
	w.mu.Lock()
	w.refused = nil
	same := cfg.Hash() == w.inForce.cfg.Hash()
	st := &state{cfg: cfg, source: source, since: time.Now()}
	if same {
		st.since, st.ignored = w.inForce.since, w.inForce.ignored
	}
	w.inForce = st
	w.mu.Unlock()
	if same {
		w.metrics.reloads.WithLabelValues("unchanged").Inc()
		return nil
	}
	w.metrics.reloads.WithLabelValues("applied").Inc()
	w.report(st)
	w.log.Info("MeshConfig applied", "source", source, "hash", cfg.Hash(), "rootNamespace", cfg.RootNamespace(),
		"ignoredFields", len(st.ignored))
	return &model.Event{Op: model.OpUpsert, Key: model.MeshKey, Object: &model.MeshObject{Config: cfg, Source: source}}
}

// report works out the fields of st that change nothing, logs them and
// sets the gauge.
func (w *Watcher) report(st *state) {
	ignored := st.cfg.Ignored()
	if td := st.cfg.TrustDomain(); w.opts.TrustDomain != "" && td != w.opts.TrustDomain {
		why := fmt.Sprintf("the trust domain in force is %s, decided at start-up; a changed trustDomain takes effect at the next start", w.opts.TrustDomain)
		if w.opts.TrustDomainFlag {
			why = "--trust-domain " + w.opts.TrustDomain + " is given on the command line and wins"
		}
		ignored = append(ignored, mesh.Field{Path: "trustDomain", Reason: why})
	}
	slices.SortFunc(ignored, func(a, b mesh.Field) int {
		if a.Path < b.Path {
			return -1
		}
		if a.Path > b.Path {
			return 1
		}
		return 0
	})
	w.mu.Lock()
	st.ignored = ignored
	w.mu.Unlock()
	w.metrics.ignored.Reset()
	for _, f := range ignored {
		w.metrics.ignored.WithLabelValues(f.Path).Set(1)
	}
	if len(ignored) > 0 {
		paths := make([]string, 0, len(ignored))
		for _, f := range ignored {
			paths = append(paths, f.Path)
		}
		w.log.Warn("MeshConfig fields not applied by discovery (see /debug/meshz)", "source", st.source, "fields", paths)
	}
	for _, warning := range st.cfg.Warnings() {
		w.log.Warn("MeshConfig warning", "source", st.source, "warning", warning)
	}
}
