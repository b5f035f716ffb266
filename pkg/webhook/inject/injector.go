package inject

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// ConfigMap keys of the istio-sidecar-injector ConfigMap.
const (
	ConfigKey = "config"
	ValuesKey = "values"
)

// Options configure the injector. Namespace and Revision are the control
// plane's own, set by the wiring; ConfigMap has a flag.
type Options struct {
	// Namespace holds the injection ConfigMap (the control plane's
	// namespace, istio-system by default).
	Namespace string
	// Revision is the control plane revision; "" is the default revision.
	// It selects namespaces and pods and is the templates' .Revision.
	Revision string
	// ConfigMap names the injection ConfigMap; "" means
	// istio-sidecar-injector, with "-<revision>" when Revision is set.
	ConfigMap string
}

// AddFlags registers the injector's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ConfigMap, "injection-configmap", o.ConfigMap,
		"ConfigMap with the sidecar injection config and values (default istio-sidecar-injector[-<revision>])")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.Namespace == "" {
		return errors.New("injector: the control plane namespace is not set")
	}
	return nil
}

// ConfigMapName is the ConfigMap the injector reads.
func (o *Options) ConfigMapName() string {
	if o.ConfigMap != "" {
		return o.ConfigMap
	}
	if isDefaultRevision(o.Revision) {
		return "istio-sidecar-injector"
	}
	return "istio-sidecar-injector-" + o.Revision
}

// Snapshot is one injection configuration in force. It is immutable.
type Snapshot struct {
	Config   *Config
	Values   Values
	Source   string // "built-in" or the ConfigMap and its resourceVersion
	LoadedAt time.Time
}

// Injector serves /inject (ServeHTTP) with the configuration in force,
// which Start keeps current from the ConfigMap, and shows it at
// /debug/inject. Every replica runs one; none needs the leader.
type Injector struct {
	opts    Options
	client  kubernetes.Interface
	log     *slog.Logger
	metrics *metrics

	snap       atomic.Pointer[Snapshot]
	mesh       atomic.Pointer[func() *meshconfig.MeshConfig]
	proxyCfgs  atomic.Pointer[func() []*networkingv1beta1.ProxyConfig]
	namespaces atomic.Pointer[corelisters.NamespaceLister]
	// namespacesSynced reports when the lister's informer has synced.
	namespacesSynced atomic.Pointer[cache.InformerSynced]
	informers        atomic.Pointer[Informers] // SetInformers'
	sel              atomic.Pointer[Selection] // the revision and its tags (tags.go)
	synced           atomic.Bool

	mu          sync.Mutex
	lastError   string
	lastErrorAt time.Time
}

// SetMesh gives the injector the MeshConfig in force, read at each
// injection: its defaultConfig is the proxies' configuration (as istiod's
// injector takes it), and templates see it as .MeshConfig.
func (i *Injector) SetMesh(mesh func() *meshconfig.MeshConfig) { i.mesh.Store(&mesh) }

// meshConfig is the MeshConfig in force, or nil without SetMesh.
func (i *Injector) meshConfig() *meshconfig.MeshConfig {
	if f := i.mesh.Load(); f != nil {
		return (*f)()
	}
	return nil
}

// SetProxyConfigs gives the injector the ProxyConfig resources in force,
// read at each injection (any order; the injector does not modify them):
// with the MeshConfig's defaultConfig and the pod's proxy.istio.io/config
// they make the proxy's configuration, as in istiod's injector.
func (i *Injector) SetProxyConfigs(list func() []*networkingv1beta1.ProxyConfig) {
	i.proxyCfgs.Store(&list)
}

// env is what an injection reads besides the pod and the injection config.
func (i *Injector) env() Env {
	e := Env{Mesh: i.meshConfig()}
	if f := i.proxyCfgs.Load(); f != nil {
		e.ProxyConfigs = (*f)()
	}
	return e
}

// New builds an Injector that starts with the built-in configuration until
// Start has read the ConfigMap. client may be nil for an injector that
// never watches (tests, file mode); namespaces are then unlabelled unless
// SetNamespaceLister provides them.
func New(opts Options, client kubernetes.Interface, reg prometheus.Registerer, log *slog.Logger) (*Injector, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("injector metrics: %w", err)
	}
	i := &Injector{opts: opts, client: client, log: log.With("component", "injector"), metrics: m}
	snap, err := builtinSnapshot(opts.Revision)
	if err != nil {
		return nil, err
	}
	i.snap.Store(snap)
	sel := RevisionSelection(opts.Revision)
	i.sel.Store(&sel)
	return i, nil
}

// Selection is which pods are this injector's: its revision and the
// revision tags that point at it, as Start last saw them.
func (i *Injector) Selection() Selection { return *i.sel.Load() }

func builtinSnapshot(revision string) (*Snapshot, error) {
	cfg, err := DefaultConfig()
	if err != nil {
		return nil, fmt.Errorf("built-in injection config: %w", err)
	}
	values, err := ParseValues(nil)
	if err != nil {
		return nil, fmt.Errorf("built-in injection values: %w", err)
	}
	return &Snapshot{Config: cfg, Values: withRevision(values, revision), Source: "built-in", LoadedAt: time.Now()}, nil
}

// withRevision makes the control plane's revision the values' revision.
func withRevision(v Values, revision string) Values {
	return Values(mergeValues(v, map[string]any{"revision": revision}))
}

// Current returns the configuration in force.
func (i *Injector) Current() *Snapshot { return i.snap.Load() }

// HasSynced reports whether Start has read the ConfigMap (or found that
// there is none) and the namespaces' informer, if any, has synced.
func (i *Injector) HasSynced() bool { return i.synced.Load() }

// SetNamespaceLister lets the injector read namespace labels from the
// process's Namespace informer, run by the caller; synced reports when it
// has synced (HasSynced waits for it). Until then, and without a lister, a
// namespace the lister lacks is read with a GET. Call it before Start.
func (i *Injector) SetNamespaceLister(l corelisters.NamespaceLister, synced cache.InformerSynced) {
	i.namespaces.Store(&l)
	i.namespacesSynced.Store(&synced)
}

// Load parses a ConfigMap's config and values and tries every template on
// a probe pod; only if all of that works does the new configuration
// replace the one in force. An error leaves the last good configuration in
// force and is shown at /debug/inject.
func (i *Injector) Load(cm *corev1.ConfigMap) error {
	snap, err := LoadConfigMap(cm, i.opts.Revision)
	if err != nil {
		i.metrics.reloads.WithLabelValues("error").Inc()
		i.mu.Lock()
		i.lastError, i.lastErrorAt = err.Error(), time.Now()
		i.mu.Unlock()
		i.log.Error("injection config refused; the last good config stays in force",
			"configmap", cm.Namespace+"/"+cm.Name, "resourceVersion", cm.ResourceVersion, "err", err)
		return err
	}
	i.snap.Store(snap)
	i.mu.Lock()
	i.lastError = ""
	i.mu.Unlock()
	i.metrics.reloads.WithLabelValues("ok").Inc()
	i.log.Info("injection config loaded", "source", snap.Source, "templates", snap.Config.TemplateNames())
	return nil
}

// LoadConfigMap builds a Snapshot from a ConfigMap, checking that each
// template renders for a probe pod.
func LoadConfigMap(cm *corev1.ConfigMap, revision string) (*Snapshot, error) {
	text, ok := cm.Data[ConfigKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s has no %q key", cm.Namespace, cm.Name, ConfigKey)
	}
	cfg, err := ParseConfig([]byte(text))
	if err != nil {
		return nil, err
	}
	values, err := ParseValues([]byte(cm.Data[ValuesKey]))
	if err != nil {
		return nil, err
	}
	values = withRevision(values, revision)
	for _, name := range cfg.TemplateNames() {
		probe := probePod(name)
		if _, err := injectPod(probe, cfg, values, Env{}); err != nil {
			return nil, fmt.Errorf("template %q fails on a probe pod: %w", name, err)
		}
	}
	return &Snapshot{
		Config: cfg, Values: values, LoadedAt: time.Now(),
		Source: fmt.Sprintf("ConfigMap %s/%s (resourceVersion %s)", cm.Namespace, cm.Name, cm.ResourceVersion),
	}, nil
}

func probePod(template string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "probe", Namespace: "default",
			Labels:      map[string]string{"app": "probe"},
			Annotations: map[string]string{"inject.istio.io/templates": template},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "probe", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}
}
