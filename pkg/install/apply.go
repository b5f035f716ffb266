package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply field manager of the installer.
const FieldManager = "discovery"

// Client talks to the cluster for bootstrap, uninstall and check.
type Client struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	Mapper  meta.ResettableRESTMapper
	// Progress receives one line per step (stderr in the commands).
	Progress io.Writer
	// PollInterval is how often waits look again.
	PollInterval time.Duration
	// Heartbeat is how often a wait says what it is still waiting for.
	Heartbeat time.Duration

	mu    sync.Mutex
	start time.Time
}

// Client-side rate limits: client-go's defaults (5 requests a second,
// bursts of 10) made an install of 31 objects take 20 s on loopback. The
// API server's priority and fairness protects it; these only bound a
// runaway loop.
const (
	clientQPS   = 200
	clientBurst = 400
)

// NewClient builds a Client for cfg, raising its rate limits where the
// caller left client-go's defaults.
func NewClient(cfg *rest.Config, progress io.Writer) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS, cfg.Burst = clientQPS, clientBurst
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	if progress == nil {
		progress = io.Discard
	}
	return &Client{
		Kube: kube, Dynamic: dyn, Mapper: mapper, Progress: progress,
		PollInterval: 500 * time.Millisecond, Heartbeat: 5 * time.Second,
	}, nil
}

func (c *Client) progress(component, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.Progress, "[%6.1fs] %-22s %s\n", time.Since(c.start).Seconds(), component, fmt.Sprintf(format, args...))
}

// ApplyOptions control Apply.
type ApplyOptions struct {
	// DryRun sends every change as a server-side dry run: nothing is
	// stored, and the result says what would change.
	DryRun bool
	// ReadinessTimeout bounds each wait for CRDs and Deployments.
	ReadinessTimeout time.Duration
	// Wait for CRDs Established and Deployments available.
	Wait bool
	// TakeOver is the migration from Istio: base objects (CRDs, shared
	// cluster roles) that another installer made are left to it instead
	// of refusing the install. Nothing the installer did not make is ever
	// changed.
	TakeOver bool
}

// Result lists what Apply did (or would do, with DryRun), as
// Kind/namespace/name.
type Result struct {
	Created, Changed, Unchanged, Pruned []string
	// Skipped are shared objects left to their owners, each with why.
	Skipped []string
	// NotReady says what a wait gave up on, and why; NotWaited are the
	// components applied after it, not waited for.
	NotReady  string
	NotWaited []string
}

// NoChange reports whether nothing was created, changed or pruned.
func (r *Result) NoChange() bool {
	return len(r.Created)+len(r.Changed)+len(r.Pruned) == 0
}

// NotReadyError is Apply's error when a wait timed out: every component
// was still applied and the prune done; it names what is not ready.
type NotReadyError struct {
	Component string
	// NotWaited are the components applied after it without a wait.
	NotWaited []string
	Err       error
}

func (e *NotReadyError) Error() string {
	s := fmt.Sprintf("%s is not ready: %v. Every component was applied and pruned", e.Component, e.Err)
	if len(e.NotWaited) > 0 {
		s += "; not waited for: " + strings.Join(e.NotWaited, ", ")
	}
	return s + ". Once it is ready, run bootstrap again (it changes nothing and waits) or discovery check"
}

func (e *NotReadyError) Unwrap() error { return e.Err }

// Apply applies m component by component (server-side apply, field manager
// discovery), waits for each, then prunes what carries m's revision labels
// but is no longer rendered. It first reads every object and refuses
// (OwnershipError, nothing applied) to write one it does not own; shared
// objects of another owner are left as they are. A wait that times out
// does not stop it: the remaining components are applied, without
// waiting, the prune is done, and a NotReadyError says what is not ready.
func (c *Client) Apply(ctx context.Context, m *Manifest, opts ApplyOptions) (*Result, error) {
	c.start = time.Now()
	res := &Result{}
	p, err := c.planApply(ctx, m, opts.TakeOver)
	if err != nil {
		return res, err
	}
	if err := p.conflicts(); err != nil {
		return res, fmt.Errorf("nothing was applied: %w", err)
	}
	res.Skipped = p.skipped()
	missing, err := c.ensureNamespaces(ctx, m, opts.DryRun)
	if err != nil {
		return res, err
	}
	var notReady *NotReadyError
	for _, comp := range m.Components {
		if err := c.applyComponent(ctx, comp, p, missing, opts.DryRun, res); err != nil {
			return res, err
		}
		if comp.Name == ComponentBase {
			c.Mapper.Reset()
		}
		switch {
		case !opts.Wait || opts.DryRun:
		case notReady != nil:
			notReady.NotWaited = append(notReady.NotWaited, comp.Name)
		default:
			if err := c.waitComponent(ctx, comp, opts.ReadinessTimeout); err != nil {
				if ctx.Err() != nil {
					return res, err
				}
				notReady = &NotReadyError{Component: comp.Name, Err: err}
				c.progress(comp.Name, "not ready; applying the remaining components without waiting")
			}
		}
	}
	pruned, err := c.prune(ctx, m, opts.DryRun)
	res.Pruned = pruned
	if err != nil {
		return res, err
	}
	if notReady != nil {
		res.NotReady, res.NotWaited = notReady.Component+": "+notReady.Err.Error(), notReady.NotWaited
		return res, notReady
	}
	return res, nil
}

// applyComponent applies one component's objects in order, as planned.
func (c *Client) applyComponent(ctx context.Context, comp Component, p *plan, missing map[string]bool, dryRun bool, res *Result) error {
	before, skipped := len(res.Created)+len(res.Changed), 0
	for _, o := range comp.Objects {
		d := p.decisions[objectKey(o)]
		switch {
		case d.action == actSkip:
			skipped++
			continue
		case missing[o.GetNamespace()]:
			// Dry run into a namespace that does not exist yet: the
			// server cannot try it, and everything would be created.
			res.Created = append(res.Created, objectKey(o))
			continue
		case d.action == actAdopt:
			c.progress(comp.Name, "%s: %s", objectKey(o), d.why)
		}
		if err := c.applyOne(ctx, o, d.live, dryRun, res); err != nil {
			return fmt.Errorf("%s: apply %s: %w", comp.Name, objectKey(o), err)
		}
	}
	line := fmt.Sprintf("%d objects applied, %d created or changed", len(comp.Objects)-skipped, len(res.Created)+len(res.Changed)-before)
	if skipped > 0 {
		line += fmt.Sprintf(", %d shared objects left to their owner", skipped)
	}
	c.progress(comp.Name, "%s", line)
	return nil
}

// ensureNamespaces creates the namespaces the manifest uses. They carry no
// install labels: uninstall never deletes a namespace. With dryRun it
// creates nothing and returns the namespaces that would be created.
func (c *Client) ensureNamespaces(ctx context.Context, m *Manifest, dryRun bool) (map[string]bool, error) {
	seen, missing := map[string]bool{}, map[string]bool{}
	for _, o := range m.Objects() {
		ns := o.GetNamespace()
		if ns == "" || seen[ns] {
			continue
		}
		seen[ns] = true
		_, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get namespace %s: %w", ns, err)
		}
		if dryRun {
			missing[ns] = true
			c.progress("namespace", "would create %s", ns)
			continue
		}
		_, err = c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			metav1.CreateOptions{FieldManager: FieldManager})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create namespace %s: %w", ns, err)
		}
		c.progress("namespace", "created %s", ns)
	}
	return missing, nil
}

func dryRunOpt(dryRun bool) []string {
	if dryRun {
		return []string{metav1.DryRunAll}
	}
	return nil
}

// resourceFor finds the dynamic client of o's kind.
func (c *Client) resourceFor(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	mapping, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.Dynamic.Resource(mapping.Resource).Namespace(o.GetNamespace()), nil
	}
	return c.Dynamic.Resource(mapping.Resource), nil
}

func (c *Client) applyOne(ctx context.Context, o, existing *unstructured.Unstructured, dryRun bool, res *Result) error {
	ri, err := c.resourceFor(o)
	if err != nil {
		return err
	}
	body, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	force := true
	applied, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: FieldManager, Force: &force, DryRun: dryRunOpt(dryRun),
	})
	if err != nil {
		return err
	}
	key := objectKey(o)
	switch {
	case existing == nil:
		res.Created = append(res.Created, key)
	case !sameContent(existing, applied):
		res.Changed = append(res.Changed, key)
	default:
		res.Unchanged = append(res.Unchanged, key)
	}
	return nil
}

// sameContent compares two versions of an object, ignoring what the
// server changes on every write (resourceVersion, managedFields) and the
// status.
func sameContent(a, b *unstructured.Unstructured) bool {
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy().Object
		delete(c, "status")
		if md, ok := c["metadata"].(map[string]any); ok {
			for _, k := range []string{"resourceVersion", "managedFields", "generation"} {
				delete(md, k)
			}
		}
		return c
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

func objectKey(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return o.GetKind() + "/" + ns + "/" + o.GetName()
	}
	return o.GetKind() + "/" + o.GetName()
}

// errTimeout wraps what a wait was still waiting for when it gave up.
var errTimeout = errors.New("timed out")
