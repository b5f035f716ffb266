package gen

import (
	"maps"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshplane/discovery/pkg/xds/envoyfilter"
)

// listeners patches the listeners of s (ctxOf gives each one's patch
// context; ctxOf("") the context whose ADD patches are added).
func (r *efRun) listeners(s *Set, ctxOf func(string) networking.EnvoyFilter_PatchContext, taken func(string) bool) *Set {
	addedBy := envoyfilter.Applied{}
	var added []proto.Message
	for _, l := range envoyfilter.AddedListeners(ctxOf(""), r.ps, addedBy) {
		added = append(added, l)
	}
	all := func(string) bool { return true }
	return r.patchSet(ListenerType, s, all, func() proto.Message { return &listenerv3.Listener{} },
		func(name string, m proto.Message, applied envoyfilter.Applied) bool {
			l := m.(*listenerv3.Listener)
			ctx := ctxOf(name)
			if !envoyfilter.PatchListener(ctx, r.ps, l, applied) {
				return false
			}
			if ctx == networking.EnvoyFilter_SIDECAR_INBOUND && r.ps.Has(routePatchKinds...) {
				patchInlineRoutes(ctx, r.ps, l, applied)
			}
			return true
		}, added, addedBy, taken)
}

// patchInlineRoutes applies the route patches to the route
// configurations inline in l's connection managers (the inbound ones,
// named inbound|PORT||, as istiod patches them with SIDECAR_INBOUND).
func patchInlineRoutes(ctx networking.EnvoyFilter_PatchContext, ps envoyfilter.Patches, l *listenerv3.Listener, applied envoyfilter.Applied) {
	chains := l.GetFilterChains()
	if l.GetDefaultFilterChain() != nil {
		chains = append(chains[:len(chains):len(chains)], l.GetDefaultFilterChain())
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			hc := &hcmv3.HttpConnectionManager{}
			if f.GetTypedConfig() == nil || f.GetTypedConfig().UnmarshalTo(hc) != nil {
				continue
			}
			rc := hc.GetRouteConfig()
			if rc == nil || !envoyfilter.RouteMatches(ctx, ps, rc.GetName()) {
				continue
			}
			mine := envoyfilter.Applied{}
			envoyfilter.PatchRouteConfiguration(ctx, ps, rc, mine)
			if len(mine) == 0 {
				continue
			}
			b, err := marshalOpts.Marshal(hc)
			if err != nil {
				continue
			}
			f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: f.GetTypedConfig().GetTypeUrl(), Value: b}}
			for k := range mine {
				applied[k] = true
			}
		}
	}
}

// clusters patches the clusters of s (ctxOf gives each one's context;
// hosts the services of inbound clusters) and adds those addCtx's ADD
// patches add.
func (r *efRun) clusters(s *Set, ctxOf func(string) networking.EnvoyFilter_PatchContext, hosts map[string][]string,
	addCtx networking.EnvoyFilter_PatchContext, taken func(string) bool,
) *Set {
	addedBy := envoyfilter.Applied{}
	var added []proto.Message
	for _, c := range envoyfilter.AddedClusters(addCtx, r.ps, addedBy) {
		added = append(added, c)
	}
	want := func(name string) bool { return envoyfilter.ClusterMatches(ctxOf(name), r.ps, name, hosts[name]) }
	return r.patchSet(ClusterType, s, want, func() proto.Message { return &clusterv3.Cluster{} },
		func(name string, m proto.Message, applied envoyfilter.Applied) bool {
			return envoyfilter.PatchCluster(ctxOf(name), r.ps, m.(*clusterv3.Cluster), hosts[name], applied)
		}, added, addedBy, taken)
}

// routes patches the route configurations of s.
func (r *efRun) routes(s *Set, ctx networking.EnvoyFilter_PatchContext) *Set {
	want := func(name string) bool { return envoyfilter.RouteMatches(ctx, r.ps, name) }
	return r.patchSet(RouteType, s, want, func() proto.Message { return &routev3.RouteConfiguration{} },
		func(_ string, m proto.Message, applied envoyfilter.Applied) bool {
			envoyfilter.PatchRouteConfiguration(ctx, r.ps, m.(*routev3.RouteConfiguration), applied)
			return true
		}, nil, nil, nil)
}

// efRefusals logs and counts patched resources not sent: a log line
// once per resource, filters and error; the counter every generation.
// last keeps, per EnvoyFilter version, its latest refusal; latest, per
// EnvoyFilter version, one refusal with the version it was made at
// (what its status reports); hook is told when latest changes.
type efRefusals struct {
	mu      sync.Mutex
	logged  map[string]bool
	n       map[string]float64
	last    map[string]string
	latest  map[string]efRefusal
	counter *prometheus.CounterVec
	hook    func(namespace, name string)
}

// efRefusal is a refusal of one version of an EnvoyFilter.
type efRefusal struct {
	generation      int64
	resourceVersion string
	message         string
}

func (r *efRefusals) note(g *Generator, where, typ, name string, filters []*envoyfilter.Filter, err error) {
	keys := make([]string, len(filters))
	for i, f := range filters {
		keys[i] = f.Key() + "@" + f.ResourceVersion
	}
	key := typ + "|" + name + "|" + strings.Join(keys, ",") + "|" + err.Error()
	msg := typ + " " + name + ": " + err.Error()
	var changed []*envoyfilter.Filter
	r.mu.Lock()
	if r.n == nil {
		r.n, r.last, r.latest = map[string]float64{}, map[string]string{}, map[string]efRefusal{}
	}
	r.n[typ]++
	if r.counter != nil {
		r.counter.WithLabelValues(typ).Inc()
	}
	if r.logged == nil || len(r.logged) >= maxLogged {
		r.logged = map[string]bool{}
	}
	if len(r.last) >= maxLogged {
		r.last = map[string]string{}
	}
	if len(r.latest) >= maxLogged {
		r.latest = map[string]efRefusal{}
	}
	for i, f := range filters {
		r.last[keys[i]] = msg
		// Of several refusals of one version, the first by message is
		// kept, so that the status does not change with every generation
		// that meets them in another order.
		want := efRefusal{generation: f.Generation, resourceVersion: f.ResourceVersion, message: msg}
		prev, ok := r.latest[f.Key()]
		if !ok || prev.generation != want.generation || prev.resourceVersion != want.resourceVersion || want.message < prev.message {
			r.latest[f.Key()] = want
			changed = append(changed, f)
		}
	}
	done := r.logged[key]
	r.logged[key] = true
	hook := r.hook
	r.mu.Unlock()
	if !done {
		g.log.Error("EnvoyFilter patch refused: the patched resource breaks Envoy's rules and is not sent (its last good patched form, or the resource as built)", "class", where,
			"type", typ, "resource", name, "envoyFilters", keys, "error", err)
	}
	if hook != nil {
		for _, f := range changed {
			hook(f.Namespace, f.Name)
		}
	}
}

// register adds discovery_envoyfilter_patches_refused_total{type}.
func (r *efRefusals) register(reg prometheus.Registerer) error {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "discovery_envoyfilter_patches_refused_total",
		Help: "Resources whose EnvoyFilter-patched form broke Envoy's rules, or that a patch added under a taken name, " +
			"and were not sent (the last good patched form, or the resource as built, instead), by type. Counted per generation.",
	}, []string{"type"})
	if err := reg.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, n := range r.n {
		c.WithLabelValues(t).Add(n)
	}
	r.counter = c
	return nil
}

// EnvoyFilterRefused returns a refusal of a patch of the EnvoyFilter
// namespace/name at its generation (or, with generation 0 as in file
// mode, at its resourceVersion): the resource that broke Envoy's rules
// once patched, or that a patch added under a taken name, and why. Of
// several, the first by message; it stays until the EnvoyFilter changes.
// The status writer reports it on the EnvoyFilter (pkg/status).
func (g *Generator) EnvoyFilterRefused(namespace, name string, generation int64, resourceVersion string) (string, bool) {
	g.efRefusals.mu.Lock()
	defer g.efRefusals.mu.Unlock()
	r, ok := g.efRefusals.latest[namespace+"/"+name]
	if !ok {
		return "", false
	}
	if generation > 0 {
		ok = r.generation == generation
	} else {
		ok = r.resourceVersion == resourceVersion
	}
	return r.message, ok
}

// OnEnvoyFilterRefused sets a function told the namespace and name of an
// EnvoyFilter whose latest refusal (EnvoyFilterRefused) changed. It is
// called from generation, outside the Generator's locks, and must not
// block.
func (g *Generator) OnEnvoyFilterRefused(hook func(namespace, name string)) {
	g.efRefusals.mu.Lock()
	defer g.efRefusals.mu.Unlock()
	g.efRefusals.hook = hook
}

// EnvoyFilterRefusals returns, per EnvoyFilter (namespace/name@version),
// the latest resource its patches could not be applied to and why;
// empty when every patch applied.
func (g *Generator) EnvoyFilterRefusals() map[string]string {
	g.efRefusals.mu.Lock()
	defer g.efRefusals.mu.Unlock()
	return maps.Clone(g.efRefusals.last)
}
