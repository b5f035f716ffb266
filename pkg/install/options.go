package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/pflag"

	"github.com/meshplane/discovery/manifests"
)

// Options are the input flags shared by manifest generate, bootstrap and
// check --pre.
type Options struct {
	Profile      string
	Files        []string
	Sets         []string
	Revision     string
	ManifestsDir string
}

// AddFlags registers the input flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Profile, "profile", o.Profile, "Profile to start from: default, demo, minimal, empty or remote (a file's spec.profile or --set profile= overrides it).")
	fs.StringArrayVarP(&o.Files, "filename", "f", o.Files, "IstioOperator file (install.istio.io/v1alpha1) laid over the profile; repeatable, merged in order.")
	fs.StringArrayVar(&o.Sets, "set", o.Sets, "Set a value of the IstioOperator spec, laid over the files, as istioctl does: path=value, e.g. values.pilot.autoscaleEnabled=false, components.ingressGateways[0].enabled=false, components.ingressGateways[name:istio-ingressgateway].k8s.replicaCount=2; repeatable.")
	fs.StringVar(&o.Revision, "revision", o.Revision, "Control plane revision (spec.revision); empty for the default revision.")
	fs.StringVar(&o.ManifestsDir, "manifests", o.ManifestsDir, "Directory with charts/ and profiles/ to render instead of the ones built in.")
}

// Validate checks what can be checked before reading any file.
func (o *Options) Validate() error {
	var errs []error
	if o.ManifestsDir != "" {
		if st, err := os.Stat(o.ManifestsDir); err != nil || !st.IsDir() {
			errs = append(errs, fmt.Errorf("--manifests %s: not a directory", o.ManifestsDir))
		}
	}
	for _, f := range o.Files {
		if _, err := os.Stat(f); err != nil {
			errs = append(errs, fmt.Errorf("-f %s: %w", f, err))
		}
	}
	for _, s := range o.Sets {
		if _, err := ParseSet(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// FS is where charts and profiles come from.
func (o *Options) FS() fs.FS {
	if o.ManifestsDir != "" {
		return os.DirFS(o.ManifestsDir)
	}
	return manifests.FS
}

// Input is the user's input as LoadSpec takes it.
func (o *Options) Input() Input {
	return Input{Profile: o.Profile, Files: o.Files, Sets: o.Sets, Revision: o.Revision}
}

// Render renders the input; defaultTag is the image tag when none is set.
func (o *Options) Render(defaultTag string) (*Manifest, error) {
	return Render(RenderOptions{FS: o.FS(), DefaultTag: defaultTag}, o.Input())
}

// CRDNames lists the CRDs the base chart installs.
func CRDNames(m *Manifest) []string {
	var out []string
	for _, o := range m.Objects() {
		if o.GetKind() == "CustomResourceDefinition" {
			out = append(out, o.GetName())
		}
	}
	return out
}
