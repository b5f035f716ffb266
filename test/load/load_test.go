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

	"go.uber.org/goleak"

	"github.com/meshplane/discovery/internal/testenv"
	"github.com/meshplane/discovery/test/load/loadkit"
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
	for name, tc := range map[string]struct {
		sotw, resume bool
		decode       string
	}{
		"delta proxies converge on every kind of change without a NACK": {decode: loadkit.DecodeFull},
		// both: each resource is also read the light way, and a
		// disagreement with the full decode is a NACK.
		"state-of-the-world proxies converge on every kind of change without a NACK": {sotw: true, decode: loadkit.DecodeBoth},
		// light: the client mode that measures the server alone; Verify
		// still checks what each proxy ends with against the World.
		"delta proxies that present their versions on reconnect converge on every change": {resume: true, decode: loadkit.DecodeLight},
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultXDSOptions()
			o.Server.Binary = discoveryBinary(t)
			o.Out = t.TempDir()
			o.World = loadkit.WorldOptions{Services: 12, Namespaces: 3, Ports: 2, EndpointsPer: 3, VirtualServices: 3, DomainSuffix: "cluster.local"}
			o.Fleet.Proxies, o.Fleet.SotW, o.Fleet.Resume, o.Fleet.Verify, o.Fleet.Decode = 6, tc.sotw, tc.resume, true, tc.decode
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
	o.World = loadkit.WorldOptions{Services: 12, Namespaces: 3, Ports: 2, EndpointsPer: 3, VirtualServices: 3, DomainSuffix: "cluster.local"}
	o.Fleet.Proxies, o.Fleet.Verify = 6, true
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
	want := map[string]int{
		loadkit.KindConnect: o.Fleet.Proxies, "idle": 0, loadkit.KindEndpoint: 3 * o.Fleet.Proxies, loadkit.KindVirtualSvc: 3 * o.Fleet.Proxies,
		loadkit.KindServiceAdd: 2 * o.Fleet.Proxies, loadkit.KindServiceRemove: 2 * o.Fleet.Proxies, loadkit.KindReconnect: 3,
	}
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
	if o.Fleet.Verify && (rep.Verify == nil || !rep.Verify.OK()) {
		t.Errorf("configuration held at the end: %v", rep.Verify)
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
		for _, k := range []string{"perProxy", "allProxies", "firstProxy", "pushes", "bytesPerProxyPerChange", "nacks", "server", "missed"} {
			if _, ok := p[k]; !ok {
				t.Errorf("phase %v: no %q in the JSON", p["name"], k)
			}
		}
		if pp, _ := p["perProxy"].(map[string]any); p["name"] == loadkit.KindEndpoint && (pp["p99Ms"] == nil || pp["p99Ms"].(float64) <= 0) {
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
