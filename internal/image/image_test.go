package image

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// buildBinary builds a static discovery binary as `make image` does.
func buildBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "discovery")
	// No -trimpath: the build then shares the cache of the other tests.
	cmd := exec.Command("go", "build", "-buildvcs=false",
		"-ldflags", "-s -w -buildid= -X main.version=v0.0.0-test -X main.gitCommit=abc123",
		"-o", out, "github.com/meshplane/discovery/cmd/discovery")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func TestImageIsReproducibleAndRunsTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the discovery binary: not a short test")
	}
	bin := buildBinary(t)
	opts := Options{
		Binary: bin, Version: "v0.0.0-test", Revision: "abc123", Source: "https://example.invalid/discovery",
		Created: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC),
	}
	first, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Digest()
	d2, _ := second.Digest()
	if d1 != d2 {
		t.Fatalf("two builds of the same inputs: %s and %s", d1, d2)
	}

	// Write it as docker load takes it, and read it back.
	path := filepath.Join(t.TempDir(), "image.tar")
	ref, _ := name.NewTag("ghcr.io/meshplane/discovery:test")
	if err := tarball.WriteToFile(path, ref, first); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &ref)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := img.Digest(); d != d1 {
		t.Errorf("digest read back %s, built %s", d, d1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != BinaryPath+" serve" {
		t.Errorf("entrypoint = %q", got)
	}
	if cf.Config.User != "65532:65532" || strings.HasPrefix(cf.Config.User, "0") || strings.HasPrefix(cf.Config.User, "1337") {
		t.Errorf("user = %q, want a non-root user other than 1337", cf.Config.User)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   opts.Source,
		"org.opencontainers.image.revision": "abc123",
		"org.opencontainers.image.version":  "v0.0.0-test",
	} {
		if cf.Config.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], want)
		}
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(opts.Created) {
		t.Errorf("os/arch/created = %s/%s/%s", cf.OS, cf.Architecture, cf.Created.Time)
	}

	// The binary in the layer runs.
	files := extract(t, img)
	for _, want := range []string{"etc/passwd", "etc/group", CAPath[1:], BinaryPath[1:]} {
		if _, ok := files[want]; !ok {
			t.Errorf("%s missing from the image", want)
		}
	}
	if !strings.Contains(string(files["etc/passwd"]), "discovery:x:65532:65532") {
		t.Errorf("/etc/passwd = %q", files["etc/passwd"])
	}
	if n := strings.Count(string(files[CAPath[1:]]), "BEGIN CERTIFICATE"); n < 100 {
		t.Errorf("CA bundle holds %d certificates", n)
	}
	run := filepath.Join(t.TempDir(), "discovery")
	if err := os.WriteFile(run, files[BinaryPath[1:]], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(run, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "discovery v0.0.0-test (commit abc123") {
		t.Errorf("discovery version from the image: %v: %s", err, out)
	}
}

func extract(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}
