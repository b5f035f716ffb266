package compat

import (
	"testing"

	"go.uber.org/goleak"
)

// Children are stopped and gRPC connections closed when each test ends;
// goleak checks that nothing the tests started is left running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run"),
	)
}
