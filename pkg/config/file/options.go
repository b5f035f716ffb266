package file

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
)

// Options configure the config-directory source.
type Options struct {
	// Dir is the directory to serve; empty turns the source off.
	Dir string
	// Debounce is how long the directory must stay quiet after a change
	// before it is read again. Changes that keep coming are read at the
	// latest ten Debounce periods after the first.
	Debounce time.Duration
	// EmptyGrace is how long the objects of a file stay in force after it
	// is read empty (no documents), and those of the files a directory
	// that has just been replaced lacks: such a read may be the middle of
	// a rewrite. The file is read again when it ends, or at its next
	// change. Zero applies empty reads at once.
	EmptyGrace time.Duration
}

// DefaultOptions returns the defaults: no directory, a 5 ms debounce, a
// 2 s grace for empty reads.
// A write or an atomic rename arrives as a few events within a millisecond
// or two; 5 ms gathers them, and a copy of many files that takes longer
// is read again at most every 50 ms. The xDS server debounces again
// (--debounce-endpoints-after, --debounce-config-after, growing under a
// burst): a longer wait here only adds to every change's latency (100 ms
// before, then 20 ms, measured in BENCHMARKS.md).
//
// A tool that truncates a file and writes it again leaves it empty for as
// long as it takes to produce the content; 2 s covers a slow renderer
// without keeping a file that was emptied on purpose in force for long.
func DefaultOptions() Options {
	return Options{Debounce: 5 * time.Millisecond, EmptyGrace: 2 * time.Second}
}

// AddFlags registers the options' flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Dir, "config-dir", o.Dir,
		"serve the mesh from the Kubernetes-style YAML files in this directory (recursively), watched for changes")
	fs.DurationVar(&o.Debounce, "config-dir-debounce", o.Debounce,
		"how long --config-dir must stay quiet after a change before it is read again")
	fs.DurationVar(&o.EmptyGrace, "config-dir-empty-grace", o.EmptyGrace,
		"how long the objects of a file in --config-dir stay in force after it is read empty (as in the middle of a rewrite), and those of the files missing from a directory that was just replaced; 0 applies such reads at once")
}

// Enabled reports whether a directory is configured.
func (o *Options) Enabled() bool { return o.Dir != "" }

// Validate checks the options. Without a Dir there is nothing to check.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	if o.Debounce <= 0 || o.Debounce > time.Minute {
		return fmt.Errorf("--config-dir-debounce %s: must be more than 0 and at most 1m", o.Debounce)
	}
	if o.EmptyGrace < 0 || o.EmptyGrace > time.Minute {
		return fmt.Errorf("--config-dir-empty-grace %s: must be at least 0 and at most 1m", o.EmptyGrace)
	}
	fi, err := os.Stat(o.Dir)
	if err != nil {
		return fmt.Errorf("--config-dir: %w", err)
	}
	if !fi.IsDir() {
		return errors.New("--config-dir " + o.Dir + ": not a directory")
	}
	return nil
}
