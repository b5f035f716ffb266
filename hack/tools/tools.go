//go:build tools

// Package tools pins the kube-apiserver command for hack/testenv.sh.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
