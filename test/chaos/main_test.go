package chaos

import (
	"flag"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/test/load/loadkit"
)

var (
	scaleFlag    = flag.String("chaos.scale", envOr("CHAOS_SCALE", "small"), "scenario size: small (make test) or big (make chaos: 1,000 services, 1,000 proxies)")
	outFlag      = flag.String("chaos.out", os.Getenv("CHAOS_OUT"), "directory for each scenario's report.json and report.txt (default: the test log only)")
	logsFlag     = flag.String("chaos.logs", os.Getenv("CHAOS_LOGS"), "directory to copy every server's log into, by scenario (default: not kept)")
	pprofFlag    = flag.Bool("chaos.server-pprof", false, "the server binary has the pprof overlay (test/load/serverpprof): scenarios save CPU profiles of their recovery into -chaos.logs")
	hostileFlag  = flag.Float64("chaos.hostile", 0.1, "SlowAndHostileClients: the fraction of proxies that misbehave (half never ACK, half read slowly)")
	slowReadFlag = flag.Duration("chaos.slow-read", 0, "SlowAndHostileClients: how long a slow proxy waits before reading each response (default: the scale's)")
	proxiesFlag  = flag.Int("chaos.proxies", 0, "proxies per scenario instead of the scale's (to push a scenario beyond)")
	decodeFlag   = flag.String("chaos.decode", loadkit.DecodeFull, "how much of each resource the simulated proxies decode: full (validated as Envoy would) or light (names, references, endpoints and routes read from the wire, so that a scenario pushed beyond measures the servers rather than the test process)")
	windowFlag   = flag.Int("chaos.window", 0, "fix the simulated proxies' gRPC flow-control windows at this many bytes (loadkit's --window; 0: gRPC's default), so that thousands of proxies on one machine hold a bounded amount received and not yet read")
	binFlag      = flag.String("chaos.server-binary", os.Getenv("CHAOS_SERVER_BINARY"), "discovery binary to run (default: built from ./cmd/discovery)")
	heapFlag     = flag.String("chaos.heap-profile", "", "write the test process's heap profile to this file once the first fleet is connected (what the simulated proxies hold)")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// scale sizes a scenario.
type scale struct {
	name    string
	world   loadkit.WorldOptions
	proxies int
	// outage is how long the API server stays down; etcdOutage how long
	// etcd does.
	outage, etcdOutage time.Duration
	// drain is --drain-period; streamAge is --max-stream-age in the
	// three-replica scenario (the server's least is 1m); shareWait is how
	// long a restarted replica is given to get its share of proxies back
	// through it (0: not waited for).
	drain, streamAge, shareWait time.Duration
	// lease, renew and retry are the leader election's timings.
	lease, renew, retry time.Duration
	// changes per change phase, applied at rate per second.
	changes int
	rate    float64
	// slowRead is how long a slow proxy waits before reading a response.
	slowRead time.Duration
	// timeout bounds every wait for convergence: generous, a bound on
	// correctness, not a performance figure.
	timeout time.Duration
}

func currentScale(t *testing.T) scale {
	t.Helper()
	switch *scaleFlag {
	case "small":
		return scale{
			name:    "small",
			world:   loadkit.WorldOptions{Services: 50, Namespaces: 5, Ports: 2, EndpointsPer: 3, VirtualServices: 10, DomainSuffix: "cluster.local"},
			proxies: 100, outage: 8 * time.Second, etcdOutage: 5 * time.Second,
			drain: 2 * time.Second, streamAge: time.Minute,
			lease: 4 * time.Second, renew: 3 * time.Second, retry: time.Second,
			changes: 6, rate: 4, slowRead: time.Second, timeout: 2 * time.Minute,
		}
	case "big":
		return scale{
			name:    "big",
			world:   loadkit.WorldOptions{Services: 1000, Namespaces: 50, Ports: 2, EndpointsPer: 10, VirtualServices: 100, DomainSuffix: "cluster.local"},
			proxies: 1000, outage: 60 * time.Second, etcdOutage: 30 * time.Second,
			drain: 20 * time.Second, streamAge: 2 * time.Minute, shareWait: 3 * time.Minute,
			lease: 15 * time.Second, renew: 10 * time.Second, retry: 2 * time.Second,
			changes: 20, rate: 1, slowRead: 2 * time.Second, timeout: 20 * time.Minute,
		}
	}
	t.Fatalf("-chaos.scale=%q: want small or big", *scaleFlag)
	return scale{}
}

// withOverrides applies the command line's overrides to a scale.
func (s scale) withOverrides() scale {
	if *proxiesFlag > 0 {
		s.proxies = *proxiesFlag
	}
	if *slowReadFlag > 0 {
		s.slowRead = *slowReadFlag
	}
	return s
}

// serverBinary is the discovery binary the scenarios run.
func serverBinary(t *testing.T) string {
	t.Helper()
	if *binFlag != "" {
		return *binFlag
	}
	return testenv.DiscoveryBinary(t)
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
