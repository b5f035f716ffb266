// Command image writes discovery's container image as a tarball that
// `docker load` and other OCI tools accept, and pushes it when asked.
// `make image` and `make push` run it; see internal/image.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/meshplane/discovery/internal/image"
)

func main() {
	var o image.Options
	var out, tag, push string
	var created int64
	flag.StringVar(&o.Binary, "binary", "", "static linux binary of discovery")
	flag.StringVar(&o.Version, "version", "dev", "version label")
	flag.StringVar(&o.Revision, "revision", "", "git commit label")
	flag.StringVar(&o.Source, "source", "https://github.com/meshplane/discovery", "source repository label")
	flag.StringVar(&o.Arch, "arch", "amd64", "GOARCH of the binary")
	flag.Int64Var(&created, "created", 0, "creation time in Unix seconds (the commit's time, for reproducible images)")
	flag.StringVar(&out, "out", "", "write the image as a tarball here")
	flag.StringVar(&tag, "tag", "ghcr.io/meshplane/discovery:dev", "image name recorded in the tarball")
	flag.StringVar(&push, "push", "", "push the image to this reference (registry/name:tag)")
	flag.Parse()
	if err := run(o, time.Unix(created, 0), out, tag, push); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o image.Options, created time.Time, out, tag, push string) error {
	if o.Binary == "" || (out == "" && push == "") {
		return fmt.Errorf("need --binary and at least one of --out and --push")
	}
	o.Created = created
	img, err := image.Build(o)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if out != "" {
		ref, err := name.NewTag(tag)
		if err != nil {
			return fmt.Errorf("--tag: %w", err)
		}
		if err := tarball.WriteToFile(out, ref, img); err != nil {
			return err
		}
		fmt.Printf("wrote %s (%s, %s)\n", out, ref, digest)
	}
	if push != "" {
		ref, err := name.ParseReference(push)
		if err != nil {
			return fmt.Errorf("--push: %w", err)
		}
		if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Printf("pushed %s@%s\n", ref, digest)
	}
	return nil
}
