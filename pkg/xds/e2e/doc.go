// Package e2e runs the xDS server against real configuration sources (a
// watched config directory, a real kube-apiserver) and a real grpc-go xDS
// client. It has tests only.
package e2e
