package streamauth

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/time/rate"
)

// A flood of refusals writes a burst of lines, not one each, and the next
// line written says how many were left out.
func TestRefusalLogIsBounded(t *testing.T) {
	var buf bytes.Buffer
	l := NewRefusalLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for range 1000 {
		l.Warn("unauthenticated", "refused")
	}
	if n := strings.Count(buf.String(), "msg=refused"); n < 10 || n > 12 {
		t.Fatalf("%d lines for 1000 refusals, want the burst of 10 (and one a second)", n)
	}
	l.limits["unauthenticated"].SetLimit(rate.Inf) // the next refusal is logged
	l.Warn("unauthenticated", "refused")
	if !strings.Contains(buf.String(), "suppressedBefore=") {
		t.Errorf("no line says how many refusals went unlogged:\n%s", buf.String())
	}
	l.Warn("identity_mismatch", "other")
	if !strings.Contains(buf.String(), "msg=other") {
		t.Error("one reason's flood silenced another reason")
	}
}
