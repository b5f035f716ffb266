package gen

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
)

// Generator builds configuration for proxy classes and proxies. It keeps no
// state between calls except a record of the warnings it has logged.
type Generator struct {
	log   *slog.Logger
	warns warnings
	ids   atomic.Uint64
	parts partCache
	// siblings holds the donor of each family of classes
	// (class_sibling.go).
	siblings siblings
	trust    trustDomains // Options.TrustDomain (trust_domain.go)
	// traceSampling is Options.TraceSampling.
	traceSampling float64
	// credentials is Options.Credentials.
	credentials bool
	// refusals logs and counts resources that broke Envoy's rules
	// (contain.go).
	refusals refusals
	// efRefusals logs and counts EnvoyFilter patches sent unpatched
	// (envoyfilter_apply.go).
	efRefusals efRefusals
	// efLastGood keeps the last good EnvoyFilter-patched resources
	// (envoyfilter_lastgood.go).
	efLastGood efLastGood
	// sharedTags is Options.SharedTags (class_shared.go).
	sharedTags bool
	// perAddress is Options.ListenersPerAddress (listener_address.go).
	perAddress bool
	// splitAfter makes every class split its port listeners after
	// generation, as a class that WasmPlugins or EnvoyFilters patch
	// does: tests compare the two ways (buildPort).
	splitAfter bool
	// slots bounds the classes generated at once (Options.Generating).
	slots chan struct{}
}

// Options configure a Generator. They are fixed at construction: what a
// Generator generates never mixes two settings.
type Options struct {
	// Log receives what generation warns about (nil: discarded).
	Log *slog.Logger
	// TrustDomain is the SPIFFE trust domain of workload identities
	// (spiffe://DOMAIN/ns/NS/sa/SA), the one the CA signs for; ""
	// means DefaultTrustDomain. TrustDomainAliases are Istio's
	// trustDomainAliases: domains the mesh migrates from, whose
	// identities count as this one's. Clients then verify servers
	// against those identities, and AuthorizationPolicy principals in
	// cluster.local or an alias also match the others.
	TrustDomain        string
	TrustDomainAliases []string
	// TraceSampling is the percentage of requests traced where neither a
	// Telemetry nor the proxy's defaultConfig.tracing.sampling says
	// (Istio's PILOT_TRACE_SAMPLING; DefaultOptions: DefaultTraceSampling).
	TraceSampling float64
	// Credentials says gateway credentialName Secrets are served over SDS
	// (a cluster's Secrets are read). Without it, a Gateway server with a
	// credentialName is left out and reported.
	Credentials bool
	// ListenersPerAddress gives each exact service address on a sidecar's
	// outbound port a listener of its own, ADDRESS_PORT, instead of a
	// filter chain on the port's listener 0.0.0.0_PORT
	// (listener_address.go): a service added or removed is one listener,
	// not the port's whole listener again.
	ListenersPerAddress bool
	// SharedTags generates the classes whose proxies are variants (their
	// keys end in |tags=) with placeholders for the service tags, so
	// that their listeners, which would otherwise name the class's
	// representative and namespace, are shared by the classes of every
	// namespace (class_shared.go). Every proxy of such a class must then
	// be served a variant of it (ClassConfig.Shared), as push.Classes
	// does.
	SharedTags bool
	// Generating bounds the classes generated at once (0: one per core,
	// GOMAXPROCS). Generation takes no locks and waits on nothing but a
	// family's first class (class_sibling.go), so more at once than
	// there are cores finishes none sooner: each holds its builders,
	// their maps and the consistency check's at the same time. The
	// server prepares 16 proxies at once, which generated up to 16 of the
	// 50 namespaces' classes side by side when a service was added at M1
	// (BENCHMARKS.md, "Classes generated one per core").
	Generating int
}

// DefaultOptions are Istio's defaults, logging to log.
func DefaultOptions(log *slog.Logger) Options {
	return Options{Log: log, TraceSampling: DefaultTraceSampling}
}

// New returns a Generator configured by o, or why o is not valid.
func New(o Options) (*Generator, error) {
	if o.TraceSampling < 0 || o.TraceSampling > 100 {
		return nil, fmt.Errorf("trace sampling %v%% is not between 0 and 100", o.TraceSampling)
	}
	trust, err := newTrustDomains(o.TrustDomain, o.TrustDomainAliases)
	if err != nil {
		return nil, err
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.Generating < 0 {
		return nil, fmt.Errorf("classes generated at once must not be negative, got %d", o.Generating)
	}
	if o.Generating == 0 {
		o.Generating = runtime.GOMAXPROCS(0)
	}
	g := &Generator{log: log, trust: trust, traceSampling: o.TraceSampling, credentials: o.Credentials, perAddress: o.ListenersPerAddress, sharedTags: o.SharedTags,
		slots: make(chan struct{}, o.Generating)}
	return g, nil
}
