package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortNeverRepeats: one process's calls (a server's five
// addresses) never get the same port twice.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// TestFreePortIsNotEphemeral: the ports are below the kernel's ephemeral
// range, which outgoing connections take from, and can be bound.
func TestFreePortIsNotEphemeral(t *testing.T) {
	lo, hi := belowEphemeral()
	if hi == 0 {
		t.Skip("the kernel's ephemeral range is not readable here: FreePort lets the kernel choose")
	}
	for range 50 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, lo, hi)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		_ = l.Close()
	}
}
