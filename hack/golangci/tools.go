//go:build tools

// Package tools pins golangci-lint for hack/golangci-lint.sh. A module of
// its own, so that the linter's dependencies never enter the product's
// graph nor move the versions hack/tools builds kube-apiserver with.
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
