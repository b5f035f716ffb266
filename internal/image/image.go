// Package image builds discovery's container image without a container
// engine: one layer holding the static binary, a CA bundle and a non-root
// user, on an empty base. The same inputs give the same digest: every
// timestamp is the commit's, the file order is fixed, and the CA bundle
// comes from a Go module pinned in go.mod rather than from the build host.
package image

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Paths and identity inside the image.
const (
	BinaryPath = "/usr/local/bin/discovery"
	CAPath     = "/etc/ssl/certs/ca-certificates.crt"
	// UID is the image's user: not root, and not 1337, which Istio's
	// sidecar uses and its iptables rules exempt from redirection.
	UID      = 65532
	UserName = "discovery"
)

// Ports the server listens on, declared in the image.
var Ports = []int{15010, 15012, 15014, 15017, 8080}

// Options describe one image.
type Options struct {
	// Binary is the path of a static linux binary of discovery.
	Binary string
	// Version, Revision and Source become OCI labels.
	Version  string
	Revision string
	Source   string
	// Created is the time recorded in the image and on every file: the
	// commit's time, so that rebuilds are identical.
	Created time.Time
	// Arch is the binary's GOARCH, amd64 by default.
	Arch string
}

// Build assembles the image.
func Build(o Options) (v1.Image, error) {
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	layerTar, err := rootfs(bin, o.Created.UTC())
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = o.Arch, "linux"
	cf.Created = v1.Time{Time: o.Created.UTC()}
	cf.Config.Entrypoint = []string{BinaryPath, "serve"}
	cf.Config.User = strconv.Itoa(UID) + ":" + strconv.Itoa(UID)
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + CAPath}
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range Ports {
		cf.Config.ExposedPorts[strconv.Itoa(p)+"/tcp"] = struct{}{}
	}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    "discovery",
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.created":  o.Created.UTC().Format(time.RFC3339),
	}
	return mutate.ConfigFile(img, cf)
}

// CABundle returns the Mozilla roots of the pinned x509roots module as PEM.
// Roots with a distrust-after constraint are left out: a PEM file cannot
// carry the constraint, and trusting them without it would be wrong.
func CABundle() []byte {
	var buf bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return buf.Bytes()
}

type entry struct {
	name string
	mode int64
	dir  bool
	uid  int
	body []byte
}

// rootfs writes the layer: directories first, then files, in a fixed order.
func rootfs(bin []byte, mtime time.Time) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", UserName, UID, UID, UserName, UserName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, UID)
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/" + UserName + "/", mode: 0o700, dir: true, uid: UID},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: CAPath[1:], mode: 0o644, body: CABundle()},
		{name: BinaryPath[1:], mode: 0o755, body: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
