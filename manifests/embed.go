// Package manifests holds the installer's Helm charts (base, discovery,
// gateway) and profiles, embedded in the binary. The CRDs of the base chart
// are generated from istio.io/api by hack/gen-crds.
package manifests

import "embed"

//go:generate go run ../hack/gen-crds -o charts/base/files/crd-all.gen.yaml

// FS holds charts/<name>/... and profiles/<name>.yaml.
//
//go:embed all:charts profiles
var FS embed.FS
