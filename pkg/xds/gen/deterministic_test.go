package gen

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// hashesEnv makes TestGenerationHashes print, in a child process of
// TestGenerationIsDeterministic, the hash of every resource it generates.
const hashesEnv = "GEN_PRINT_HASHES"

// TestGenerationIsDeterministic: the same World gives the same bytes, and
// so the same resource hashes, in two processes (a server before and after
// a restart), so that a proxy presenting the versions it holds is resent
// nothing. Nested Anys holding maps (a TypedStruct's Struct, metadata)
// were written in Go's map order, random per process: every listener was
// resent after a restart at M1. Within one process the shared parts hide
// it, hence two child processes.
func TestGenerationIsDeterministic(t *testing.T) {
	if os.Getenv(hashesEnv) != "" {
		t.Skip("this is the child process")
	}
	var runs [2]map[string]string
	for i := range runs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGenerationHashes$", "-test.count=1")
		cmd.Env = append(os.Environ(), hashesEnv+"=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		runs[i] = map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "hash" {
				runs[i][f[1]] = f[2]
			}
		}
	}
	if len(runs[0]) == 0 {
		t.Fatal("the child printed no hashes")
	}
	var differ []string
	for k, h := range runs[0] {
		if runs[1][k] != h {
			differ = append(differ, k)
		}
	}
	sort.Strings(differ)
	if len(differ) > 0 || len(runs[0]) != len(runs[1]) {
		t.Errorf("%d of %d resources hash differently in two processes, e.g. %v", len(differ), len(runs[0]), differ[:min(5, len(differ))])
	}
}

// TestGenerationHashes prints the hashes TestGenerationIsDeterministic
// compares: a sidecar's and a gateway's configuration of a small mesh.
func TestGenerationHashes(t *testing.T) {
	if os.Getenv(hashesEnv) == "" {
		t.Skip("run by TestGenerationIsDeterministic in a child process")
	}
	store := model.NewStore(model.StoreOptions{})
	if _, err := store.Apply(worldtest.Mesh(40, 4, 2)...); err != nil {
		t.Fatal(err)
	}
	w := store.World()
	g := newForTest(quietLog())
	for _, p := range []*model.Proxy{
		labelled(t, "sidecar", "ns-0", map[string]string{"app": "svc-0"}),
		labelled(t, "router", "ns-1", map[string]string{"istio": "ingressgateway"}),
	} {
		cc, err := g.Class(w, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		pc := g.Proxy(w, p, cc)
		for _, typ := range TypeURLs {
			for _, n := range pc.Names(typ) {
				fmt.Printf("hash %s/%s/%s %s\n", p.Type, ShortType(typ), n, pc.Get(typ, n).Hash)
			}
		}
	}
}
