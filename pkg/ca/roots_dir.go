package ca

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// dirRoots (file mode) reads the CA from a directory with Istio's file
// names; an empty directory gets a self-signed root.
type dirRoots struct {
	dir         string
	trustDomain string
	keyType     string
	interval    time.Duration
	log         *slog.Logger
	now         func() time.Time

	mu     sync.Mutex
	loaded map[string][]byte // the directory as load last read it
}

var _ rootSource = (*dirRoots)(nil)

var bundleFiles = []string{KeyCACert, KeyCAKey, KeyCertChain, KeyRootCert}

func (d *dirRoots) read() (map[string][]byte, error) {
	data := map[string][]byte{}
	for _, name := range append(bundleFiles, KeyTLSCert, KeyTLSKey, KeyTLSCA) {
		b, err := os.ReadFile(filepath.Join(d.dir, name))
		switch {
		case err == nil:
			data[name] = b
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("read CA directory: %w", err)
		}
	}
	return data, nil
}

func (d *dirRoots) load(_ context.Context, current *Bundle) (*Bundle, error) {
	data, err := d.read()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.loaded = data
	d.mu.Unlock()
	if len(data[KeyCACert]) > 0 || len(data[KeyTLSCert]) > 0 {
		b, err := ParseBundle(data)
		if err != nil {
			return nil, fmt.Errorf("CA directory %s: %w", d.dir, err)
		}
		return b, nil
	}
	b := current
	if b == nil {
		if b, err = NewSelfSignedBundle(d.trustDomain, d.keyType, d.now()); err != nil {
			return nil, err
		}
	}
	if err := d.write(b); err != nil {
		return nil, err
	}
	d.log.Info("wrote self-signed root", "dir", d.dir, "notAfter", b.Root.NotAfter.UTC().Format(time.RFC3339))
	return b, nil
}

// write stores b in the directory, each file replaced atomically; the key
// first and readable by the owner only.
func (d *dirRoots) write(b *Bundle) error {
	data, err := b.Data()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return fmt.Errorf("CA directory: %w", err)
	}
	for _, name := range []string{KeyCAKey, KeyRootCert, KeyCertChain, KeyCACert} {
		tmp, err := os.CreateTemp(d.dir, "."+name+".*")
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		_, werr := tmp.Write(data[name])
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("write %s: %w", name, err)
		}
		if err := os.Rename(tmp.Name(), filepath.Join(d.dir, name)); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// watch polls the directory (robust to the symlink swaps of mounted
// Secrets) and calls changed when its content differs from what was last
// seen, starting from what load read: a change made in between counts.
func (d *dirRoots) watch(ctx context.Context, changed func()) error {
	d.mu.Lock()
	last := d.loaded
	d.mu.Unlock()
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		data, err := d.read()
		if err != nil {
			d.log.Warn("read CA directory", "dir", d.dir, "err", err)
			continue
		}
		if !sameData(last, data) {
			last = data
			changed()
		}
	}
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
