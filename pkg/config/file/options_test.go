package file

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/meshplane/discovery/pkg/model"
)

func TestOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "f.yaml")
	writeFile(t, notDir, "")
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"accepts no directory: the source is off":   {args: nil},
		"accepts a directory with the default wait": {args: []string{"--config-dir", dir}},
		"accepts a directory and a debounce":        {args: []string{"--config-dir", dir, "--config-dir-debounce", "1s"}},
		"rejects a directory that does not exist": {
			args: []string{"--config-dir", filepath.Join(dir, "missing")}, wantErr: "no such file or directory",
		},
		"rejects a file":              {args: []string{"--config-dir", notDir}, wantErr: "not a directory"},
		"rejects a debounce of zero":  {args: []string{"--config-dir", dir, "--config-dir-debounce", "0s"}, wantErr: "must be more than 0"},
		"rejects a debounce too long": {args: []string{"--config-dir", dir, "--config-dir-debounce", "2m"}, wantErr: "at most 1m"},
		"accepts an empty grace of zero: empty reads apply at once": {
			args: []string{"--config-dir", dir, "--config-dir-empty-grace", "0s"},
		},
		"rejects a negative empty grace": {
			args: []string{"--config-dir", dir, "--config-dir-empty-grace", "-1s"}, wantErr: "must be at least 0",
		},
		"rejects an empty grace too long": {
			args: []string{"--config-dir", dir, "--config-dir-empty-grace", "2m"}, wantErr: "at most 1m",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			opts := DefaultOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			opts.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := opts.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestStartFailsWhenTheDirectoryIsGone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Dir = dir
	src, err := New(opts, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.Start(ctx, model.NewStore(model.StoreOptions{})); err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("Start = %v, want a missing-directory error", err)
	}
	if src.HasSynced() {
		t.Error("HasSynced after a failed start")
	}
}

func TestNewRejectsMetricsRegisteredTwice(t *testing.T) {
	opts := DefaultOptions()
	opts.Dir = t.TempDir()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := New(opts, log, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(opts, log, reg); err == nil {
		t.Error("a second source on the same registry was accepted")
	}
}

func TestDebugShowsFilesAndErrors(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	writeFile(t, a, service("reviews", 9080)+"---\n"+badDoc)
	h := start(t, dir)
	mux := http.NewServeMux()
	h.src.RegisterDebug(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/debug/config_dirz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Dir   string
		Files []struct {
			Path    string
			Objects int
			Errors  int
		}
		Errors []struct {
			File           string
			Doc, Line      int
			Error, Message string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Dir != dir || len(got.Files) != 1 || got.Files[0].Path != a || got.Files[0].Objects != 1 || got.Files[0].Errors != 1 {
		t.Errorf("files = %+v", got)
	}
	if len(got.Errors) != 1 || got.Errors[0].File != a || got.Errors[0].Doc != 1 || got.Errors[0].Line != 10 ||
		got.Errors[0].Error != "VirtualService: spec: json: cannot unmarshal number into a list" ||
		got.Errors[0].Message != a+":10: document 1: "+got.Errors[0].Error {
		t.Errorf("errors = %+v", got.Errors)
	}
}

func TestDebounceWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	tests := map[string]struct {
		now  time.Time
		want time.Duration
	}{
		"waits a full period after the first change":          {now: t0, want: 100 * ms},
		"waits a full period after a change that follows":     {now: t0.Add(500 * ms), want: 100 * ms},
		"waits no later than ten periods after the first":     {now: t0.Add(950 * ms), want: 50 * ms},
		"reads at once when changes kept coming for too long": {now: t0.Add(2 * time.Second), want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := debounceWait(t0, tc.now, 100*ms); got != tc.want {
				t.Errorf("wait = %v, want %v", got, tc.want)
			}
		})
	}
}
