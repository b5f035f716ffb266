package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/pkg/model"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// discoveryBinary builds cmd/discovery of this repository once per test
// binary; tests that need a running server skip in -short mode.
func discoveryBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs discovery serve; skipped with -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "discovery-load-test")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "discovery")
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		cmd := exec.Command(goTool, "build", "-o", binary, "../../cmd/discovery")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			binary = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build discovery: %v\n%s", buildErr, binary)
	}
	return binary
}

func TestXDSRunReachesEveryProxyWithEveryChange(t *testing.T) {
	for name, sotw := range map[string]bool{
		"delta proxies converge on every kind of change without a NACK":              false,
		"state-of-the-world proxies converge on every kind of change without a NACK": true,
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultXDSOptions()
			o.Server.Binary = discoveryBinary(t)
			o.Out = t.TempDir()
			o.World = WorldOptions{Services: 12, Namespaces: 3, Ports: 2, EndpointsPer: 3, VirtualServices: 3, DomainSuffix: "cluster.local"}
			o.Fleet.Proxies, o.Fleet.SotW = 6, sotw
			o.Endpoints, o.VirtualServices, o.Services, o.Reconnects = 3, 3, 4, 3
			o.Rate, o.Idle, o.Timeout = 20, 200*time.Millisecond, 30*time.Second
			var log strings.Builder
			rep, err := RunXDS(context.Background(), o, &log)
			if err != nil {
				t.Fatalf("run: %v\n%s", err, log.String())
			}
			checkReport(t, rep, o)
			checkJSON(t, filepath.Join(o.Out, "report.json"))
		})
	}
}

func TestXDSRunOnARealAPIServer(t *testing.T) {
	bin := discoveryBinary(t)
	env := testenv.Start(t)
	o := DefaultXDSOptions()
	o.Server.Binary, o.Kubeconfig, o.Out = bin, env.Kubeconfig, t.TempDir()
	o.World = WorldOptions{Services: 12, Namespaces: 3, Ports: 2, EndpointsPer: 3, VirtualServices: 3, DomainSuffix: "cluster.local"}
	o.Fleet.Proxies = 6
	o.Endpoints, o.VirtualServices, o.Services, o.Reconnects = 3, 3, 4, 3
	o.Rate, o.Idle, o.Timeout = 20, 200*time.Millisecond, 30*time.Second
	var log strings.Builder
	rep, err := RunXDS(context.Background(), o, &log)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	checkReport(t, rep, o)
}

// checkReport: every phase reached every proxy it concerns, nothing was
// refused, and the figures of each phase are there.
func checkReport(t *testing.T, rep *Report, o XDSOptions) {
	t.Helper()
	want := map[string]int{kindConnect: o.Fleet.Proxies, "idle": 0, kindEndpoint: 3 * o.Fleet.Proxies, kindVirtualSvc: 3 * o.Fleet.Proxies,
		kindServiceAdd: 2 * o.Fleet.Proxies, kindServiceRemove: 2 * o.Fleet.Proxies, kindReconnect: 3}
	seen := map[string]bool{}
	for _, p := range rep.Phases {
		seen[p.Name] = true
		if p.Missed != 0 || p.Converged != want[p.Name] {
			t.Errorf("%s: %d converged, %d missed; want %d converged", p.Name, p.Converged, p.Missed, want[p.Name])
		}
		if p.NACKs != 0 || p.StreamsDropped != 0 {
			t.Errorf("%s: %d NACKs, %d dropped streams; notes %v", p.Name, p.NACKs, p.StreamsDropped, rep.Notes)
		}
		if p.Name == "idle" {
			continue
		}
		if p.PerProxy.P50 <= 0 || p.PerProxy.Max < p.PerProxy.P99 || p.Pushes == 0 || p.BytesPerProxyPerChange <= 0 {
			t.Errorf("%s: figures missing: %+v", p.Name, p)
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no %s phase", k)
		}
	}
	if rep.Server.PeakRSSMiB <= 0 || rep.Server.CPUSeconds <= 0 {
		t.Errorf("server figures missing: %+v", rep.Server)
	}
	if rep.Metrics["pilot_xds_pushes"] == 0 || rep.Metrics["pilot_total_xds_rejects"] != 0 {
		t.Errorf("server metrics: %v", rep.Metrics)
	}
}

func checkJSON(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Phases []map[string]any `json:"phases"`
		Server map[string]any   `json:"server"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Phases {
		for _, k := range []string{"perProxy", "allProxies", "pushes", "bytesPerProxyPerChange", "nacks", "server", "missed"} {
			if _, ok := p[k]; !ok {
				t.Errorf("phase %v: no %q in the JSON", p["name"], k)
			}
		}
		if pp, _ := p["perProxy"].(map[string]any); p["name"] == kindEndpoint && (pp["p99Ms"] == nil || pp["p99Ms"].(float64) <= 0) {
			t.Errorf("endpoint phase: no p99 in the JSON: %v", p)
		}
	}
	if v, _ := doc.Server["peakRssMiB"].(float64); v <= 0 {
		t.Errorf("no server peakRssMiB in the JSON: %v", doc.Server)
	}
}

func TestCABenchmarkSignsEveryCSR(t *testing.T) {
	for name, tc := range map[string]struct {
		key  string
		rate float64
	}{
		"ECDSA P-256 workload keys are signed as fast as clients ask": {"ecdsa", 0},
		"RSA 2048 workload keys are signed as fast as clients ask":    {"rsa", 0},
		"CSRs sent on schedule are all signed":                        {"ecdsa", 40},
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultCAOptions()
			o.Server.Binary = discoveryBinary(t)
			o.Out, o.Clients, o.Duration, o.Key, o.Rate = t.TempDir(), 4, 300*time.Millisecond, tc.key, tc.rate
			rep, err := RunCA(context.Background(), o, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Errors != 0 || rep.Requests == 0 || rep.PerSecond <= 0 || rep.Latency.P99 <= 0 {
				t.Errorf("report: %+v", rep)
			}
			// 40/s for 0.3 s from 4 clients: 3 each.
			if tc.rate > 0 && rep.Requests != 12 {
				t.Errorf("%d requests on schedule, want 12", rep.Requests)
			}
		})
	}
}

func TestWebhookBenchmarkInjectsEveryPod(t *testing.T) {
	o := DefaultWebhookOptions()
	o.Server.Binary = discoveryBinary(t)
	o.Out, o.Rate, o.Duration = t.TempDir(), 100, 300*time.Millisecond
	rep, err := RunWebhook(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 || rep.Requests != 30 || rep.Latency.P99 <= 0 {
		t.Errorf("report: %+v", rep)
	}
}

func TestDecodeRefusesWhatEnvoyWould(t *testing.T) {
	hcmWithUnknownFilter := &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
		Name: "f", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/not.a.Known.Type"}},
	}}}}}
	for name, tc := range map[string]struct {
		typeURL string
		msg     proto.Message
		wantErr string
	}{
		"refuses a cluster without a name":                  {typeCDS, &clusterv3.Cluster{}, "invalid cds"},
		"refuses a listener whose filter config is unknown": {typeLDS, hcmWithUnknownFilter, "not.a.Known.Type"},
		"accepts Istio's own extensions, which Istio's Envoy knows": {typeLDS, &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "istio.metadata_exchange", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/istio.envoy.config.filter.network.metadata_exchange.Config"}},
		}}}}}, ""},
		"accepts a plain EDS cluster": {typeCDS, &clusterv3.Cluster{Name: "outbound|80||a.b.svc.cluster.local", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = decode(tc.typeURL, b)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSubSetCountsWhatIsMissing(t *testing.T) {
	s := newSubSet()
	s.ref(1)
	s.ref(2)
	s.ref(2)
	s.received(1)
	if s.missing != 1 {
		t.Fatalf("missing %d, want 1 (name 2)", s.missing)
	}
	s.unref(2)
	if s.missing != 1 {
		t.Fatalf("missing %d after dropping one of two references, want 1", s.missing)
	}
	s.unref(2)
	if s.missing != 0 {
		t.Fatalf("missing %d after dropping the last reference, want 0", s.missing)
	}
	sub, unsub := s.pending()
	if len(sub) != 1 || sub[0] != 1 || len(unsub) != 1 || unsub[0] != 2 {
		t.Fatalf("pending: subscribe %v, unsubscribe %v; want [1] and [2]", sub, unsub)
	}
	s.removed(1)
	if s.missing != 1 {
		t.Fatalf("missing %d after the server removed name 1, want 1", s.missing)
	}
}

func TestGeneratedProxiesAreValidIstioNodes(t *testing.T) {
	w, err := NewWorld(WorldOptions{Services: 7, Namespaces: 3, Ports: 3, EndpointsPer: 2, VirtualServices: 2, DomainSuffix: "cluster.local"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFleet(FleetOptions{Proxies: 15, IstioVersion: "1.28.0"}, w)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.proxies {
		md := p.node.GetMetadata()
		if md == nil {
			md = &structpb.Struct{}
		}
		px, err := model.ParseProxy(p.node.GetId(), md.AsMap())
		if err != nil {
			t.Fatalf("proxy %d: %v", p.idx, err)
		}
		if px.Type != model.ProxySidecar || px.Namespace == "" || len(px.IPs) != 1 {
			t.Fatalf("proxy %d parsed as %+v", p.idx, px)
		}
	}
}

func TestPercentilesUseNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p := percentiles(ds)
	if p.P50 != 100 || p.P90 != 180 || p.P99 != 198 || p.Max != 200 || p.Count != 200 {
		t.Fatalf("got %+v", p)
	}
}
