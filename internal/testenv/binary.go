package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// DiscoveryBinary builds ./cmd/discovery once per test process and returns
// its path, for tests that run the real binary.
func DiscoveryBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "discovery-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "discovery")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/meshplane/discovery/cmd/discovery").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/discovery: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}
