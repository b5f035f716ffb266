package conformance

import (
	"fmt"
	"os"
	"testing"

	"github.com/meshplane/discovery/hack/conformance/istiod"
)

func TestMain(m *testing.M) {
	if err := istiod.Quiet(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
