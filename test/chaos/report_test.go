package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshplane/discovery/test/load/loadkit"
)

// result is one scenario's report: the figures every scenario has, then
// its own.
type result struct {
	Scenario string               `json:"scenario"`
	Scale    string               `json:"scale"`
	Command  string               `json:"command"`
	Commit   string               `json:"commit,omitempty"`
	Started  time.Time            `json:"started"`
	Seconds  float64              `json:"seconds"`
	Machine  loadkit.Machine      `json:"machine"`
	World    loadkit.WorldOptions `json:"world"`
	Proxies  int                  `json:"proxies"`
	// Correct of Checked proxies held the World's configuration at the end.
	Correct int `json:"correctProxies"`
	Checked int `json:"checkedProxies"`
	// RecoveryMs is the time until every proxy was correct again after
	// the fault (the scenario says from when).
	RecoveryMs float64 `json:"recoveryMs"`
	// RecoveryFrom says what RecoveryMs is measured from.
	RecoveryFrom string `json:"recoveryFrom"`
	NACKs        int64  `json:"nacks"`
	// ServerErrors and ServerWarnings count the servers' log lines of
	// those levels; LogMessages are the most frequent.
	ServerErrors   int      `json:"serverErrors"`
	ServerWarnings int      `json:"serverWarnings"`
	LogMessages    []string `json:"logMessages,omitempty"`
	PeakRSSMiB     float64  `json:"serverPeakRssMiB"`
	Figures        []figure `json:"figures"`
	Notes          []string `json:"notes,omitempty"`
	Failed         bool     `json:"failed"`
}

// figure is one measured value.
type figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
	Note  string  `json:"note,omitempty"`
}

func newResult(scenario string, sc scale) *result {
	return &result{
		Scenario: scenario, Scale: sc.name + overridesNote(), Started: time.Now(), Machine: loadkit.MachineInfo(), World: sc.world, Proxies: sc.proxies,
		Commit:  loadkit.GitCommit(),
		Command: fmt.Sprintf("go test ./test/chaos -run '%s' -chaos.scale=%s", testNameOf(scenario), sc.name),
	}
}

// testNameOf is the test that runs a scenario (they share the prefix).
func testNameOf(scenario string) string { return "Test" + scenario }

func (r *result) figure(name string, v float64, unit, note string) {
	r.Figures = append(r.Figures, figure{Name: name, Value: v, Unit: unit, Note: note})
}

func (r *result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// finish logs the report and writes it under dir/<scenario>/ when dir is
// set.
func (r *result) finish(t *testing.T, dir string) {
	t.Helper()
	r.Seconds = time.Since(r.Started).Seconds()
	r.Machine.LoadAvgEnd = loadkit.LoadAvg()
	r.Failed = t.Failed()
	text := r.text()
	t.Log("\n" + text)
	if dir == "" {
		return
	}
	out := filepath.Join(dir, r.Scenario)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Error(err)
		return
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Error(err)
		return
	}
	if err := os.WriteFile(filepath.Join(out, "report.json"), append(js, '\n'), 0o644); err != nil {
		t.Error(err)
	}
	if err := os.WriteFile(filepath.Join(out, "report.txt"), []byte(text), 0o644); err != nil {
		t.Error(err)
	}
}

func (r *result) text() string {
	var b strings.Builder
	verdict := "passed"
	if r.Failed {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "scenario %s (%s, %s): %d services x %d ports, %d endpoints each, %d namespaces; %d proxies\n",
		r.Scenario, r.Scale, verdict, r.World.Services, r.World.Ports, r.World.EndpointsPer, r.World.Namespaces, r.Proxies)
	fmt.Fprintf(&b, "command: %s\n", r.Command)
	fmt.Fprintf(&b, "machine: %d CPUs (%s), load %s -> %s; commit %s; %.0f s\n", r.Machine.CPUs, r.Machine.CPUModel,
		r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd, r.Commit, r.Seconds)
	fmt.Fprintf(&b, "proxies correct at the end: %d of %d\n", r.Correct, r.Checked)
	fmt.Fprintf(&b, "time until all correct again: %.0f ms (%s)\n", r.RecoveryMs, r.RecoveryFrom)
	fmt.Fprintf(&b, "NACKs: %d\n", r.NACKs)
	fmt.Fprintf(&b, "server log: %d errors, %d warnings\n", r.ServerErrors, r.ServerWarnings)
	for _, m := range r.LogMessages {
		fmt.Fprintf(&b, "  %s\n", m)
	}
	fmt.Fprintf(&b, "server peak RSS: %.0f MiB\n", r.PeakRSSMiB)
	for _, f := range r.Figures {
		fmt.Fprintf(&b, "%s: %s", f.Name, formatValue(f.Value))
		if f.Unit != "" {
			fmt.Fprintf(&b, " %s", f.Unit)
		}
		if f.Note != "" {
			fmt.Fprintf(&b, " (%s)", f.Note)
		}
		b.WriteString("\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return b.String()
}

func formatValue(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.2f", v)
}

// overridesNote names the command line's overrides of the scale.
func overridesNote() string {
	var parts []string
	if *proxiesFlag > 0 {
		parts = append(parts, fmt.Sprintf("-chaos.proxies=%d", *proxiesFlag))
	}
	if *slowReadFlag > 0 {
		parts = append(parts, "-chaos.slow-read="+slowReadFlag.String())
	}
	if *decodeFlag != loadkit.DecodeFull {
		parts = append(parts, "-chaos.decode="+*decodeFlag)
	}
	if *windowFlag != 0 {
		parts = append(parts, fmt.Sprintf("-chaos.window=%d", *windowFlag))
	}
	if *hostileFlag != 0.1 {
		parts = append(parts, fmt.Sprintf("-chaos.hostile=%g", *hostileFlag))
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, " ")
}
