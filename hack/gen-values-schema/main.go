// Command gen-values-schema writes each chart's values.schema.json and
// files/noeffect.json from the value types pkg/install validates the
// installer's input against, so that Helm and the installer refuse the
// same values and warn about the same ones (one truth). With --check it
// fails, writing nothing, when a committed file differs.
//
//	go run ./hack/gen-values-schema [--charts manifests/charts] [--check]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/meshplane/discovery/pkg/install"
)

func main() {
	charts := flag.String("charts", "manifests/charts", "directory of the charts")
	check := flag.Bool("check", false, "fail if a committed values.schema.json is not current, writing nothing")
	flag.Parse()
	if err := run(*charts, *check); err != nil {
		fmt.Fprintln(os.Stderr, "gen-values-schema:", err)
		os.Exit(1)
	}
}

func run(dir string, check bool) error {
	names := make([]string, 0, len(install.ChartSchemas))
	for n := range install.ChartSchemas {
		names = append(names, n)
	}
	sort.Strings(names)
	var stale []string
	for _, n := range names {
		for file, gen := range map[string]func(string) ([]byte, error){"values.schema.json": install.ChartSchema, "files/noeffect.json": install.ChartNoEffect} {
			want, err := gen(n)
			if err != nil {
				return err
			}
			path := filepath.Join(dir, n, file)
			if check {
				have, err := os.ReadFile(path)
				if err != nil || !bytes.Equal(have, want) {
					stale = append(stale, path)
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "gen-values-schema: wrote %s\n", path)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("%v not current: run go run ./hack/gen-values-schema", stale)
	}
	return nil
}
