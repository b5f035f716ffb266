package server

import (
	"context"
	"testing"
	"time"
)

// lateClock is a clock whose every sleep ends late, as on a saturated
// machine.
type lateClock struct {
	now  time.Time
	late time.Duration
}

func (c *lateClock) Now() time.Time { return c.now }

func (c *lateClock) Sleep(ctx context.Context, d time.Duration) bool {
	c.now = c.now.Add(d + c.late)
	return ctx.Err() == nil
}

// TestDrainSpreadKeepsItsPeriodWhenWakeUpsAreLate: 650 streams over 20 s
// with every wake-up 15 ms late are closed in 20 s and one late wake-up,
// not in 650 late steps (30 s).
func TestDrainSpreadKeepsItsPeriodWhenWakeUpsAreLate(t *testing.T) {
	clk := &lateClock{now: time.Unix(1000, 0), late: 15 * time.Millisecond}
	start := clk.now
	var at []time.Duration
	n := spread(context.Background(), 650, 20*time.Second, clk, func(int) { at = append(at, clk.now.Sub(start)) })
	if n != 650 || len(at) != 650 {
		t.Fatalf("closed %d (%d calls), want 650", n, len(at))
	}
	if at[0] != 0 {
		t.Errorf("first stream closed at %s, want at once", at[0])
	}
	if last, most := at[649], 20*time.Second; last > most {
		t.Errorf("last stream closed %s after the start, want within the period %s", last, most)
	}
	// Still spread: the middle one near the middle.
	if mid := at[325]; mid < 9*time.Second || mid > 11*time.Second {
		t.Errorf("stream 325 of 650 closed at %s, want about 10s", mid)
	}
}

// TestDrainSpreadStopsWithItsContext: a drain whose context ends closes
// no more streams.
func TestDrainSpreadStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clk := &lateClock{now: time.Unix(1000, 0)}
	calls := 0
	n := spread(ctx, 10, time.Second, clk, func(i int) {
		calls++
		if i == 3 {
			cancel()
		}
	})
	if n != 4 || calls != 4 {
		t.Errorf("spread returned %d after %d calls, want 4 and 4 (the context ended during the fourth)", n, calls)
	}
}
