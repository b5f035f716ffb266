package server

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/spf13/pflag"

	"github.com/meshplane/discovery/pkg/credentials"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Options configure the xDS server.
type Options struct {
	// DebounceAfter is how long the World must be quiet before a push.
	DebounceAfter time.Duration
	// DebounceEndpoints is the base quiet period of a batch of endpoint
	// changes only; it doubles under a burst, up to DebounceAfter
	// (push.Debouncer). 0 debounces them like any other change.
	DebounceEndpoints time.Duration
	// DebounceConfig is the base quiet period of a batch holding a
	// change other than endpoints; it doubles under a burst, up to
	// DebounceAfter (push.Debouncer). 0 waits DebounceAfter, fixed.
	DebounceConfig time.Duration
	// DebounceMax is the longest a change waits for a push.
	DebounceMax time.Duration
	// PushConcurrency is how many proxies are prepared for a push at once.
	PushConcurrency int
	// SendTimeout closes a stream whose proxy does not read a response
	// within this time (0: never).
	SendTimeout time.Duration
	// MaxUnackedPushes closes a stream whose proxy has not answered its
	// last response while this many further pushes for it came and went.
	MaxUnackedPushes int
	// PushWave is the first wave of a class's full pushes (canary.go);
	// off by default.
	PushWave PushWave
	// PushWaveTimeout releases the rest of a class when its wave has not
	// answered.
	PushWaveTimeout time.Duration
	// PushStatusSize is how many pushes /debug/push_status remembers.
	PushStatusSize int
	// TrustDomain is the SPIFFE trust domain of workload identities (the
	// serve command's --trust-domain); "" means cluster.local.
	TrustDomain string
	// TraceSampling is the percentage of requests traced where neither a
	// Telemetry nor the proxy's defaultConfig.tracing.sampling says
	// (Istio's PILOT_TRACE_SAMPLING).
	TraceSampling float64
	// ListenersPerAddress gives each service address on a sidecar's
	// outbound port a listener of its own instead of a filter chain on the
	// port's listener (gen.Options.ListenersPerAddress).
	ListenersPerAddress bool
	// Credentials, when set, are the gateway credentials (credentialName
	// Secrets) served over SDS and referred to by gateway listeners; the
	// serve command sets it when it may read Secrets. Not a flag.
	Credentials credentials.Reader
	// WarmingStreams bounds the streams being given their first
	// configuration at once; the first request of another waits for a
	// slot (warming.go). 0: no bound.
	WarmingStreams int
	// WarmingTimeout is the longest a stream holds its slot.
	WarmingTimeout time.Duration
	// What one stream may hold (limits.go); 0 turns a bound off.
	// MaxStreams bounds the replica's open xDS streams.
	MaxStreams int
	// MaxStreamsPerConnection bounds the concurrent streams (xDS and CA
	// calls) of one connection; the serve command sets it on its gRPC
	// servers. Envoy, pilot-agent and grpc-go hold one ADS stream each.
	MaxStreamsPerConnection int
	// MaxNodeBytes bounds a node (ID and metadata, as marshaled).
	MaxNodeBytes int
	// MaxNodeIDBytes bounds a node ID.
	MaxNodeIDBytes int
	// MaxNames bounds the names a stream subscribes to, per type.
	MaxNames int
	// MaxUnknownNames bounds the subscribed names of a type that the
	// proxy's configuration does not hold.
	MaxUnknownNames int
	// IdleGC collects garbage when the push queue drains and the heap has
	// used half its room to the next collection (idlegc.go), so that
	// collections land between pushes rather than on a fan-out.
	IdleGC bool

	// Istio's debug types over xDS (debugxds.go).
	// SystemNamespace is the control plane's namespace (the serve
	// command's --namespace): an authenticated caller of it sees every
	// proxy, as istiod lets callers of its root namespace.
	SystemNamespace string
	// DebugNamespaces are further namespaces whose callers see every
	// proxy (Istio's DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES). Callers of
	// other namespaces see only the proxies of their own namespace.
	DebugNamespaces []string
	// Instance names this replica and its build in the responses to the
	// debug types, where istioctl reads the control plane's identity.
	Instance Instance
}

// Instance is what the debug types say of the replica that answers, in
// the shape of istiod's control plane identifier.
type Instance struct {
	// ID names the replica: its Pod's name.
	ID string
	// Version, GitRevision, GoVersion, BuildStatus and GitTag are the
	// build's, as in istiod's version.BuildInfo.
	Version, GitRevision, GoVersion, BuildStatus, GitTag string
}

// DefaultOptions returns the defaults the flags show.
func DefaultOptions() Options {
	return Options{
		DebounceAfter: 100 * time.Millisecond,
		DebounceMax:   10 * time.Second,
		// An endpoint change alone is pushed after 10ms; see BENCHMARKS.md.
		DebounceEndpoints: 10 * time.Millisecond,
		// A lone configuration change is pushed after 20ms, a burst
		// merged as with istiod's fixed 100ms; see BENCHMARKS.md.
		DebounceConfig:  20 * time.Millisecond,
		PushConcurrency: 16,
		// About a second of work per slot on this project's test
		// machine: 2 cores configure some 50 sidecars a second at M1.
		WarmingStreams:   32 * runtime.GOMAXPROCS(0),
		WarmingTimeout:   5 * time.Second,
		SendTimeout:      30 * time.Second,
		MaxUnackedPushes: 100,
		PushStatusSize:   100,
		PushWaveTimeout:  10 * time.Second,
		TraceSampling:    gen.DefaultTraceSampling,
		// Twice the 10,000 proxies one replica is built to serve.
		MaxStreams:              20000,
		MaxStreamsPerConnection: 16,
		// Istio's node metadata carries the pod's labels and annotations
		// (at most 256 KiB in Kubernetes) and a few KB more.
		MaxNodeBytes:   512 << 10,
		MaxNodeIDBytes: 1024,
		// A proxy subscribes to what it was sent: an EDS name per
		// cluster, a route name per port. A 10,000-service mesh with two
		// ports each and no Sidecar scoping is 20,000; five times that.
		MaxNames:        100000,
		MaxUnknownNames: 10000,
		IdleGC:          true,
	}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	d := DefaultOptions()
	fs.DurationVar(&o.DebounceAfter, "debounce-after", d.DebounceAfter, "push once the configuration has been quiet for this long")
	fs.DurationVar(&o.DebounceEndpoints, "debounce-endpoints-after", d.DebounceEndpoints, "push a batch of endpoint changes only once it has been quiet for this long; the period doubles with each further change in the batch, up to --debounce-after (0: as --debounce-after)")
	fs.DurationVar(&o.DebounceConfig, "debounce-config-after", d.DebounceConfig, "push a batch holding a configuration change once it has been quiet for this long; the period doubles with each further change in the batch, up to --debounce-after (0: a fixed --debounce-after, as istiod's PILOT_DEBOUNCE_AFTER)")
	fs.DurationVar(&o.DebounceMax, "debounce-max", d.DebounceMax, "push at the latest this long after a change, even if changes keep coming")
	fs.IntVar(&o.PushConcurrency, "push-concurrency", d.PushConcurrency, "proxies prepared for a push at once")
	fs.DurationVar(&o.SendTimeout, "xds-send-timeout", d.SendTimeout, "close an xDS stream whose proxy does not read a response within this time (0: never)")
	fs.Var(&o.PushWave, "xds-push-wave", "send a change that rebuilds a proxy class's configuration first to this many of its proxies (N) or this share of them (P%), and to the rest only once all of those acknowledged it; a rejection holds the rest on their last good configuration until the next change (0: off)")
	fs.DurationVar(&o.PushWaveTimeout, "xds-push-wave-timeout", d.PushWaveTimeout, "how long the rest of a class waits for its first wave to answer before it gets the change anyway")
	fs.IntVar(&o.MaxUnackedPushes, "xds-max-unacked-pushes", d.MaxUnackedPushes, "close an xDS stream whose proxy leaves its last response unanswered through this many pushes")
	fs.IntVar(&o.MaxStreams, "xds-max-streams", d.MaxStreams, "xDS streams this replica holds at most; beyond it new streams get RESOURCE_EXHAUSTED (0: no limit)")
	fs.IntVar(&o.WarmingStreams, "xds-warming-streams", d.WarmingStreams, "new xDS streams given their first configuration at once; the first request of any other waits for a slot (0: no bound)")
	fs.DurationVar(&o.WarmingTimeout, "xds-warming-timeout", d.WarmingTimeout, "the longest a new stream holds its slot: it frees it when it has answered its first listeners or routes, or ends")
	fs.IntVar(&o.MaxStreamsPerConnection, "xds-max-streams-per-connection", d.MaxStreamsPerConnection, "concurrent gRPC streams one connection to :15010 or :15012 may hold")
	fs.IntVar(&o.MaxNodeBytes, "xds-max-node-bytes", d.MaxNodeBytes, "largest node (ID and metadata) an xDS request may carry; a larger one ends the stream (0: no limit)")
	fs.IntVar(&o.MaxNodeIDBytes, "xds-max-node-id-bytes", d.MaxNodeIDBytes, "longest node ID an xDS request may carry (0: no limit)")
	fs.IntVar(&o.MaxNames, "xds-max-names", d.MaxNames, "resource names of one type an xDS stream may subscribe to (0: no limit)")
	fs.BoolVar(&o.IdleGC, "xds-idle-gc", d.IdleGC, "collect garbage once pushes have been idle for 20ms, when the heap has used half its room to the next collection, so that collections land between pushes rather than on a fan-out (false: only when Go's pacer starts one)")
	fs.IntVar(&o.MaxUnknownNames, "xds-max-unknown-names", d.MaxUnknownNames, "subscribed names of one type that the proxy's configuration does not hold, at most (0: no limit)")
	fs.Float64Var(&o.TraceSampling, "trace-sampling", d.TraceSampling, "percentage of requests traced where neither a Telemetry nor the proxy's defaultConfig.tracing.sampling says, 0 to 100 (istiod's PILOT_TRACE_SAMPLING)")
	fs.BoolVar(&o.ListenersPerAddress, "xds-listeners-per-address", d.ListenersPerAddress, "give each service address on a sidecar's outbound port a listener of its own (ADDRESS_PORT, handed over by original destination, istiod's shape for TCP services) instead of a filter chain on the port's listener 0.0.0.0_PORT: a service added or removed sends each proxy one small listener instead of the port's whole listener, for more listeners per proxy")
	fs.StringSliceVar(&o.DebugNamespaces, "xds-debug-allowed-namespaces", o.DebugNamespaces,
		"namespaces besides the control plane's whose authenticated callers see every proxy over Istio's debug xDS types (istio.io/debug/*); others see only their own namespace's proxies")
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.DebounceAfter <= 0 {
		errs = append(errs, fmt.Errorf("--debounce-after must be positive, got %s", o.DebounceAfter))
	}
	if o.DebounceEndpoints < 0 {
		errs = append(errs, fmt.Errorf("--debounce-endpoints-after must not be negative, got %s", o.DebounceEndpoints))
	}
	if o.DebounceConfig < 0 {
		errs = append(errs, fmt.Errorf("--debounce-config-after must not be negative, got %s", o.DebounceConfig))
	}
	if o.DebounceMax < o.DebounceAfter {
		errs = append(errs, fmt.Errorf("--debounce-max (%s) must be at least --debounce-after (%s)", o.DebounceMax, o.DebounceAfter))
	}
	if o.PushConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--push-concurrency must be at least 1, got %d", o.PushConcurrency))
	}
	if o.WarmingStreams < 0 || o.WarmingTimeout < 0 {
		errs = append(errs, fmt.Errorf("--xds-warming-streams and --xds-warming-timeout must not be negative, got %d and %s", o.WarmingStreams, o.WarmingTimeout))
	}
	if o.SendTimeout < 0 {
		errs = append(errs, fmt.Errorf("--xds-send-timeout must not be negative, got %s", o.SendTimeout))
	}
	for _, b := range []struct {
		flag string
		v    int
	}{
		{"--xds-max-streams", o.MaxStreams},
		{"--xds-max-node-bytes", o.MaxNodeBytes},
		{"--xds-max-node-id-bytes", o.MaxNodeIDBytes},
		{"--xds-max-names", o.MaxNames},
		{"--xds-max-unknown-names", o.MaxUnknownNames},
	} {
		if b.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %d", b.flag, b.v))
		}
	}
	if o.TraceSampling < 0 || o.TraceSampling > 100 {
		errs = append(errs, fmt.Errorf("--trace-sampling must be between 0 and 100, got %v", o.TraceSampling))
	}
	if o.MaxStreamsPerConnection < 1 {
		errs = append(errs, fmt.Errorf("--xds-max-streams-per-connection must be at least 1, got %d", o.MaxStreamsPerConnection))
	}
	if !o.PushWave.Off() && o.PushWaveTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--xds-push-wave-timeout must be positive with --xds-push-wave, got %s", o.PushWaveTimeout))
	}
	if o.MaxUnackedPushes < 1 {
		errs = append(errs, fmt.Errorf("--xds-max-unacked-pushes must be at least 1, got %d", o.MaxUnackedPushes))
	}
	return errors.Join(errs...)
}
