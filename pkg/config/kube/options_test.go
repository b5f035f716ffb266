package kube

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestOptionsValidate(t *testing.T) {
	tests := map[string]struct {
		resync  time.Duration
		wantErr bool
	}{
		"accepts resyncs turned off":        {resync: 0},
		"accepts a resync every ten hours":  {resync: 10 * time.Hour},
		"rejects a negative resync period":  {resync: -time.Second, wantErr: true},
		"rejects a resync period below 1 s": {resync: time.Millisecond, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := Options{ResyncPeriod: tc.resync}
			if err := o.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate() = %v, wantErr %v", err, tc.wantErr)
			}
		})
	}
}

func TestOptionsAddFlags(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--kube-resync-period=5m"}); err != nil {
		t.Fatal(err)
	}
	if o.ResyncPeriod != 5*time.Minute {
		t.Errorf("ResyncPeriod = %v, want 5m", o.ResyncPeriod)
	}
}
