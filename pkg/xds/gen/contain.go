package gen

import (
	"errors"
	"fmt"
	"sync"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
)

// Containment: what one bad config may cost.
//
// Every generated resource passes Envoy's field rules (ValidateAll) before
// it is sent. A config that slipped past /validate (file mode, a webhook
// that was down, a rule /validate lacks) can make a resource break them: a
// header name with CR/LF in a VirtualService match, say. Leaving that
// resource out used to leave a listener referring to a RouteConfiguration
// that did not exist, the class's configuration was inconsistent and was
// not published at all, for every proxy that saw the host: one
// VirtualService stopped the mesh. Now the blast radius is the resources
// the config produced:
//
//   - a RouteConfiguration keeps every virtual host that passes; a virtual
//     host that does not (one host's routes) is replaced by one that
//     answers every request with 500 (fail closed: its matches and
//     policies cannot be expressed, so nothing is routed by a guess), or,
//     should even that fail (its domains), is dropped (404);
//   - a ClusterLoadAssignment is replaced by an empty one (no endpoints:
//     503), so that its cluster stays consistent;
//   - a Cluster or Listener is left out: nothing refers to it by name that
//     would make the rest inconsistent, and what it served fails closed
//     (no cluster: 503; no listener: the connection is refused).
//
// Every refusal is logged (once per resource and error), counted in
// discovery_xds_resources_refused_total{type,outcome}, and the configs it
// came from are reported by the Auditor, which applies the same rules to
// each config (EnvoyRefusals) and sets a status condition. Removing or
// fixing the config regenerates the resource at once: containment keeps no
// state.
//
// Istio has no equivalent: istiod sends what it builds and Envoy NACKs the
// whole resource, keeping its previous version (or, for a new proxy,
// warming without it). Replacing only the failing part, the same way on
// every replica and for every proxy, is what keeps the rest serving.

// RefusedError says a generated resource broke Envoy's rules.
type RefusedError struct {
	TypeURL, Name string
	// StandIn is set when a fail-closed stand-in was sent in its place.
	StandIn bool
	Err     error
}

func (e *RefusedError) Error() string {
	what := "left out"
	if e.StandIn {
		what = "replaced by a fail-closed stand-in"
	}
	return fmt.Sprintf("%s %q %s: %v", ShortType(e.TypeURL), e.Name, what, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refusedStatus is the body of a refused virtual host's answer.
const refusedStatus = 500

// buildResource is NewResource for generated configuration: a resource
// that breaks Envoy's rules is replaced by its stand-in when its type has
// one. The error, a *RefusedError, is returned with the stand-in.
func buildResource(name, typeURL string, m proto.Message) (*Resource, error) {
	r, err := NewResource(name, typeURL, m)
	if err == nil {
		return r, nil
	}
	s := standIn(typeURL, name, m)
	if s == nil {
		return nil, &RefusedError{TypeURL: typeURL, Name: name, Err: err}
	}
	r, serr := NewResource(name, typeURL, s)
	if serr != nil {
		return nil, &RefusedError{TypeURL: typeURL, Name: name, Err: errors.Join(err, serr)}
	}
	return r, &RefusedError{TypeURL: typeURL, Name: name, StandIn: true, Err: err}
}

// standIn returns what is sent instead of m, or nil for types without a
// stand-in.
func standIn(typeURL, name string, m proto.Message) proto.Message {
	switch typeURL {
	case RouteType:
		rc, ok := m.(*routev3.RouteConfiguration)
		if !ok {
			return nil
		}
		return containRoutes(rc)
	case EndpointType:
		return &endpointv3.ClusterLoadAssignment{ClusterName: name}
	}
	return nil
}

// containRoutes is rc with each virtual host that breaks Envoy's rules
// replaced by one that refuses every request, and dropped if that breaks
// them too. rc itself is not changed.
func containRoutes(rc *routev3.RouteConfiguration) *routev3.RouteConfiguration {
	out := &routev3.RouteConfiguration{Name: rc.Name, ValidateClusters: rc.ValidateClusters, IgnorePortInHostMatching: rc.IgnorePortInHostMatching}
	for _, vh := range rc.VirtualHosts {
		if sound(vh) {
			out.VirtualHosts = append(out.VirtualHosts, vh)
			continue
		}
		refused := &routev3.VirtualHost{Name: vh.Name, Domains: vh.Domains, Routes: []*routev3.Route{{
			Name:  "discovery-refused",
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
				Status: refusedStatus,
			}},
		}}}
		if sound(refused) {
			out.VirtualHosts = append(out.VirtualHosts, refused)
		}
	}
	// Fields of the configuration itself (none are built from Istio
	// configs today) are left out with the rest if they break the rules.
	full := proto.Clone(rc).(*routev3.RouteConfiguration)
	full.VirtualHosts = out.VirtualHosts
	if sound(full) {
		return full
	}
	return out
}

// sound reports whether m passes Envoy's rules and marshals (strings are
// UTF-8), as NewResource requires.
func sound(m interface {
	proto.Message
	ValidateAll() error
},
) bool {
	if m.ValidateAll() != nil {
		return false
	}
	_, err := marshalOpts.Marshal(m)
	return err == nil
}

// refusals logs and counts refused resources: a log line once per
// resource and error (generation repeats for every class and push), the
// counter every time.
type refusals struct {
	mu      sync.Mutex
	logged  map[string]bool // type|name|error; forgotten past maxLogged
	n       map[[2]string]float64
	counter *prometheus.CounterVec
}

// maxLogged bounds the refusals remembered as logged: past it they are
// forgotten (and each is logged once more), so a churn of bad configs
// cannot grow the set without end.
const maxLogged = 10000

func (r *refusals) note(g *Generator, class string, sources []ConfigRef, err *RefusedError) {
	outcome := "left_out"
	if err.StandIn {
		outcome = "stand_in"
	}
	key := err.TypeURL + "|" + err.Name + "|" + err.Err.Error()
	r.mu.Lock()
	if r.n == nil {
		r.n = map[[2]string]float64{}
	}
	r.n[[2]string{ShortType(err.TypeURL), outcome}]++
	if r.counter != nil {
		r.counter.WithLabelValues(ShortType(err.TypeURL), outcome).Inc()
	}
	if r.logged == nil || len(r.logged) >= maxLogged {
		r.logged = map[string]bool{}
	}
	done := r.logged[key]
	r.logged[key] = true
	r.mu.Unlock()
	if done {
		return
	}
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.Key.String()
	}
	g.log.Error("generated resource breaks Envoy's rules: not sent as built", "class", class,
		"type", ShortType(err.TypeURL), "resource", err.Name, "standIn", err.StandIn, "from", names, "error", err.Err)
}

// register adds discovery_xds_resources_refused_total to reg, with the
// refusals counted before.
func (r *refusals) register(reg prometheus.Registerer) error {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "discovery_xds_resources_refused_total",
		Help: "Generated resources that broke Envoy's rules and were not sent as built, by type and outcome " +
			"(stand_in: a fail-closed stand-in was sent; left_out: nothing was). Counted per generation.",
	}, []string{"type", "outcome"})
	if err := reg.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range r.n {
		c.WithLabelValues(k[0], k[1]).Add(n)
	}
	r.counter = c
	return nil
}
