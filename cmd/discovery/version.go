package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and gitCommit are set with -ldflags "-X main.version=... -X main.gitCommit=...".
var (
	version   = ""
	gitCommit = ""
)

type versionInfo struct {
	Version   string `json:"version"`
	GitCommit string `json:"gitCommit,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
	modified  bool
}

// BuildStatus is "Modified" for a build of a tree with changes, else
// "Clean", as Istio's build info says it.
func (v versionInfo) BuildStatus() string {
	if v.modified {
		return "Modified"
	}
	return "Clean"
}

// istiodString is the build as istiod's /version answers it, which
// istioctl version reads: <version>-<revision>-<status>.
func (v versionInfo) istiodString() string {
	return v.Version + "-" + v.GitCommit + "-" + v.BuildStatus()
}

func currentVersion() versionInfo {
	v := versionInfo{Version: version, GitCommit: gitCommit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && v.GitCommit == "":
				v.GitCommit = s.Value
			case s.Key == "vcs.modified":
				v.modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

func newVersionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of discovery",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := currentVersion()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "discovery %s (commit %s, %s, %s)\n", v.Version, orNone(v.GitCommit), v.GoVersion, v.Platform)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "Print the version as JSON.")
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
