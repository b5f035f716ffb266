// Package grpcexample is a runnable example of proxyless gRPC through
// discovery: server/ is a gRPC backend, client/ a grpc-go client that dials
// xds:///echo.demo.svc.cluster.local:7070 with a bootstrap it writes, and
// the YAML files here are the mesh `discovery serve --config-dir` serves.
// See README.md.
package grpcexample
