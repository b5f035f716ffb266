package ca

import "testing"

func TestParseSPIFFEID(t *testing.T) {
	tests := map[string]struct {
		in   string
		want Identity
		ok   bool
	}{
		"parses a workload ID":               {in: "spiffe://cluster.local/ns/app/sa/a", want: Identity{"cluster.local", "app", "a"}, ok: true},
		"refuses another scheme":             {in: "https://cluster.local/ns/app/sa/a"},
		"refuses a missing service account":  {in: "spiffe://cluster.local/ns/app/sa/"},
		"refuses extra path segments":        {in: "spiffe://cluster.local/ns/app/sa/a/b"},
		"refuses an escaped slash":           {in: "spiffe://cluster.local/ns/a%2Fb/sa/x"},
		"refuses a dot-dot namespace":        {in: "spiffe://cluster.local/ns/../sa/x"},
		"refuses a query":                    {in: "spiffe://cluster.local/ns/app/sa/a?x=1"},
		"refuses user info":                  {in: "spiffe://u@cluster.local/ns/app/sa/a"},
		"refuses an upper-case service name": {in: "spiffe://cluster.local/ns/app/sa/A"},
		"refuses no trust domain":            {in: "spiffe:///ns/app/sa/a"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSPIFFEID(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseSPIFFEID(%q) error %v, want ok %v", tc.in, err, tc.ok)
			}
			if tc.ok && (got != tc.want || got.SPIFFEID() != tc.in) {
				t.Fatalf("ParseSPIFFEID(%q) = %+v", tc.in, got)
			}
		})
	}
}

func TestIdentityFromUsername(t *testing.T) {
	tests := map[string]struct {
		in string
		ok bool
	}{
		"accepts a service account":         {in: "system:serviceaccount:app:a", ok: true},
		"refuses a user":                    {in: "alice"},
		"refuses a node":                    {in: "system:node:n1"},
		"refuses a name with an extra part": {in: "system:serviceaccount:app:a:b"},
		"refuses an empty namespace":        {in: "system:serviceaccount::a"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := identityFromUsername(tc.in, "cluster.local")
			if (err == nil) != tc.ok {
				t.Fatalf("identityFromUsername(%q) error %v, want ok %v", tc.in, err, tc.ok)
			}
		})
	}
}
