package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// PatcherOptions name the webhook configurations whose caBundle the
// leader keeps. Namespace and Revision are the control plane's own.
type PatcherOptions struct {
	Namespace string
	Revision  string
	// InjectorConfig is the MutatingWebhookConfiguration; "" means
	// istio-sidecar-injector[-<revision>], as Istio names it.
	InjectorConfig string
	// ValidatorConfig is the ValidatingWebhookConfiguration; "" means
	// istio-validator[-<revision>]-<namespace>, as Istio names it.
	ValidatorConfig string
	// Resync re-checks both configurations this often even without
	// events, and is the longest back-off after a failed patch.
	Resync time.Duration
	// TagWebhooks also keeps the caBundle of the injector webhooks
	// (*sidecar-injector.istio.io) of every MutatingWebhookConfiguration
	// labelled istio.io/rev=<revision>, as istiod does: revision tags,
	// whose names are not known in advance. It needs list, watch and patch
	// on every MutatingWebhookConfiguration.
	TagWebhooks bool
}

// AddFlags registers the patcher's flags.
func (o *PatcherOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.InjectorConfig, "injector-webhook-config", o.InjectorConfig,
		"MutatingWebhookConfiguration whose caBundle the leader keeps (default istio-sidecar-injector[-<revision>])")
	fs.StringVar(&o.ValidatorConfig, "validator-webhook-config", o.ValidatorConfig,
		"ValidatingWebhookConfiguration whose caBundle the leader keeps (default istio-validator[-<revision>]-<namespace>)")
}

// Validate checks the options.
func (o *PatcherOptions) Validate() error {
	if o.Namespace == "" {
		return errors.New("caBundle patcher: the control plane namespace is not set")
	}
	return nil
}

func (o *PatcherOptions) injectorName() string {
	if o.InjectorConfig != "" {
		return o.InjectorConfig
	}
	return "istio-sidecar-injector" + revSuffix(o.Revision)
}

func (o *PatcherOptions) validatorName() string {
	if o.ValidatorConfig != "" {
		return o.ValidatorConfig
	}
	return "istio-validator" + revSuffix(o.Revision) + "-" + o.Namespace
}

func revSuffix(r string) string {
	if r == "" || r == "default" {
		return ""
	}
	return "-" + r
}

// RootSource returns the CA root in force (PEM) and a channel closed when
// it is replaced. With the CA: func() ([]byte, <-chan struct{}) { b, ch :=
// ca.Authority().Watch(); return b.RootPEM(), ch }.
type RootSource func() ([]byte, <-chan struct{})

// CABundlePatcher keeps the caBundle of every webhook in our two webhook
// configurations equal to the CA root. It runs on the leader only. It
// patches nothing but caBundle, with a JSON patch that first tests each
// webhook's name, so a concurrent edit makes the patch fail rather than
// land on the wrong webhook; failurePolicy and everything else are left as
// installed.
type CABundlePatcher struct {
	opts    PatcherOptions
	client  kubernetes.Interface
	roots   RootSource
	log     *slog.Logger
	patches *prometheus.CounterVec
	kick    chan struct{}
}

// NewCABundlePatcher builds the patcher; its metric goes to reg.
func NewCABundlePatcher(opts PatcherOptions, client kubernetes.Interface, roots RootSource, reg prometheus.Registerer, log *slog.Logger) (*CABundlePatcher, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Minute
	}
	patches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "webhook_cabundle_patches_total", Help: "caBundle patches of the webhook configurations, by configuration and result.",
	}, []string{"config", "result"})
	if err := reg.Register(patches); err != nil {
		return nil, fmt.Errorf("caBundle patcher metrics: %w", err)
	}
	return &CABundlePatcher{
		opts: opts, client: client, roots: roots, patches: patches,
		log:  log.With("component", "cabundle-patcher"),
		kick: make(chan struct{}, 1),
	}, nil
}

// Start watches both configurations and the root until ctx ends, patching
// whenever a caBundle differs from the root. Failures are retried with a
// back-off. It returns nil when ctx ends.
func (p *CABundlePatcher) Start(ctx context.Context) error {
	mf := p.factory(byName(p.opts.injectorName()))
	vf := p.factory(byName(p.opts.validatorName()))
	defer mf.Shutdown()
	defer vf.Shutdown()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.trigger() },
		UpdateFunc: func(_, _ any) { p.trigger() },
	}
	if _, err := mf.Admissionregistration().V1().MutatingWebhookConfigurations().Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch MutatingWebhookConfiguration: %w", err)
	}
	if _, err := vf.Admissionregistration().V1().ValidatingWebhookConfigurations().Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch ValidatingWebhookConfiguration: %w", err)
	}
	mf.Start(ctx.Done())
	vf.Start(ctx.Done())
	if p.opts.TagWebhooks {
		tf := p.factory(func(o *metav1.ListOptions) { o.LabelSelector = p.revisionSelector() })
		defer tf.Shutdown()
		if _, err := tf.Admissionregistration().V1().MutatingWebhookConfigurations().Informer().AddEventHandler(handler); err != nil {
			return fmt.Errorf("watch the revision's MutatingWebhookConfigurations: %w", err)
		}
		tf.Start(ctx.Done())
	}

	root, changed := p.roots()
	backoff := time.Second
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			root, changed = p.roots()
		case <-p.kick:
		case <-timer.C:
		}
		wait := p.opts.Resync
		if err := p.Reconcile(ctx, root); err != nil {
			p.log.Error("caBundle patch failed; will retry", "err", err, "in", backoff)
			wait, backoff = backoff, min(backoff*2, p.opts.Resync)
		} else {
			backoff = time.Second
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

func (p *CABundlePatcher) factory(tweak func(*metav1.ListOptions)) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithTweakListOptions(tweak))
}

func byName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

// revisionSelector selects the configurations of the patcher's revision,
// tags included.
func (p *CABundlePatcher) revisionSelector() string {
	rev := p.opts.Revision
	if rev == "" {
		rev = "default"
	}
	return "istio.io/rev=" + rev
}

func (p *CABundlePatcher) trigger() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Reconcile patches the configurations once so that every webhook's
// caBundle is root: the injector's and the validator's, and with
// TagWebhooks the injector webhooks of the revision's other configurations
// (its tags). A configuration that does not exist (yet) is skipped: the
// installer creates it and the watch brings the patcher back.
func (p *CABundlePatcher) Reconcile(ctx context.Context, root []byte) error {
	if len(root) == 0 {
		return errors.New("no CA root to publish")
	}
	var errs []error
	mname := p.opts.injectorName()
	mwc, err := p.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mname, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		errs = append(errs, fmt.Errorf("get MutatingWebhookConfiguration %s: %w", mname, err))
	default:
		errs = append(errs, p.patchMutating(ctx, mname, mutatingHooks(mwc, allHooks), root))
	}
	if p.opts.TagWebhooks {
		errs = append(errs, p.reconcileTags(ctx, mname, root))
	}
	vname := p.opts.validatorName()
	vwc, err := p.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vname, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		errs = append(errs, fmt.Errorf("get ValidatingWebhookConfiguration %s: %w", vname, err))
	default:
		errs = append(errs, p.patch("ValidatingWebhookConfiguration", vname, validatingHooks(vwc), root, func(pt []byte) error {
			_, err := p.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, vname, types.JSONPatchType, pt, metav1.PatchOptions{FieldManager: fieldManager})
			return err
		}))
	}
	return errors.Join(errs...)
}

// reconcileTags patches the injector webhooks of the revision's
// configurations other than own.
func (p *CABundlePatcher) reconcileTags(ctx context.Context, own string, root []byte) error {
	list, err := p.client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: p.revisionSelector()})
	if err != nil {
		return fmt.Errorf("list the revision's MutatingWebhookConfigurations: %w", err)
	}
	var errs []error
	for i := range list.Items {
		c := &list.Items[i]
		if c.Name == own {
			continue
		}
		errs = append(errs, p.patchMutating(ctx, c.Name, mutatingHooks(c, injectorHook), root))
	}
	return errors.Join(errs...)
}

func (p *CABundlePatcher) patchMutating(ctx context.Context, name string, hooks []hook, root []byte) error {
	return p.patch("MutatingWebhookConfiguration", name, hooks, root, func(pt []byte) error {
		_, err := p.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, pt, metav1.PatchOptions{FieldManager: fieldManager})
		return err
	})
}

// fieldManager names the patcher in managedFields.
const fieldManager = "discovery-cabundle"

// hook is one webhook of a configuration: its index, name and caBundle.
type hook struct {
	index  int
	name   string
	bundle []byte
}

func allHooks(string) bool { return true }

// injectorHook selects Istio's injector webhooks, as istiod's patcher
// does (by the suffix of their names).
func injectorHook(name string) bool { return strings.HasSuffix(name, "sidecar-injector.istio.io") }

func mutatingHooks(c *admissionregistrationv1.MutatingWebhookConfiguration, keep func(string) bool) []hook {
	var out []hook
	for i, w := range c.Webhooks {
		if keep(w.Name) {
			out = append(out, hook{i, w.Name, w.ClientConfig.CABundle})
		}
	}
	return out
}

func validatingHooks(c *admissionregistrationv1.ValidatingWebhookConfiguration) []hook {
	out := make([]hook, len(c.Webhooks))
	for i, w := range c.Webhooks {
		out[i] = hook{i, w.Name, w.ClientConfig.CABundle}
	}
	return out
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// caBundlePatch returns the JSON patch that sets caBundle on every webhook
// of hooks whose bundle differs from root, each guarded by a test of its
// name; nil when nothing differs.
func caBundlePatch(hooks []hook, root []byte) ([]byte, error) {
	var ops []patchOp
	for _, h := range hooks {
		if bytes.Equal(h.bundle, root) {
			continue
		}
		prefix := "/webhooks/" + strconv.Itoa(h.index)
		ops = append(ops,
			patchOp{Op: "test", Path: prefix + "/name", Value: h.name},
			patchOp{Op: "add", Path: prefix + "/clientConfig/caBundle", Value: root}) // []byte marshals as base64, as the API wants
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

func (p *CABundlePatcher) patch(kind, name string, hooks []hook, root []byte, apply func([]byte) error) error {
	pt, err := caBundlePatch(hooks, root)
	if err != nil || pt == nil {
		return err
	}
	if err := apply(pt); err != nil {
		p.patches.WithLabelValues(name, "error").Inc()
		return fmt.Errorf("patch caBundle of %s %s: %w", kind, name, err)
	}
	p.patches.WithLabelValues(name, "ok").Inc()
	p.log.Info("caBundle updated", "kind", kind, "name", name, "webhooks", len(hooks))
	return nil
}
