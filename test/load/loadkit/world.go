package loadkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/spf13/pflag"
)

// WorldOptions size the generated mesh.
type WorldOptions struct {
	// Services is the number of services, spread round-robin over the
	// namespaces.
	Services int
	// Namespaces is the number of namespaces, ns-0 .. ns-(n-1).
	Namespaces int
	// Ports is the number of ports per service (1 to 3): http 80,
	// grpc 7070, tcp 9000.
	Ports int
	// EndpointsPer is the number of ready endpoints of each service.
	EndpointsPer int
	// VirtualServices is how many services (the first ones) get a
	// VirtualService.
	VirtualServices int
	// DomainSuffix is the cluster's DNS suffix.
	DomainSuffix string
}

// DefaultWorldOptions is workload S: 100 services, 10 namespaces.
func DefaultWorldOptions() WorldOptions {
	return WorldOptions{Services: 100, Namespaces: 10, Ports: 2, EndpointsPer: 10, VirtualServices: 10, DomainSuffix: "cluster.local"}
}

// AddFlags registers the world's flags.
func (o *WorldOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Services, "services", o.Services, "services in the generated world")
	fs.IntVar(&o.Namespaces, "namespaces", o.Namespaces, "namespaces the services and proxies are spread over")
	fs.IntVar(&o.Ports, "ports", o.Ports, "ports per service (1-3): http 80, grpc 7070, tcp 9000")
	fs.IntVar(&o.EndpointsPer, "endpoints", o.EndpointsPer, "ready endpoints per service")
	fs.IntVar(&o.VirtualServices, "virtual-services", o.VirtualServices, "services (the first ones) that get a VirtualService")
	fs.StringVar(&o.DomainSuffix, "domain-suffix", o.DomainSuffix, "the cluster's DNS suffix")
}

// Validate reports options that cannot make a world.
func (o *WorldOptions) Validate() error {
	var errs []error
	if o.Services < 1 || o.Services > 60000 {
		errs = append(errs, fmt.Errorf("--services %d: must be 1 to 60000", o.Services))
	}
	if o.Namespaces < 1 || o.Namespaces > o.Services {
		errs = append(errs, fmt.Errorf("--namespaces %d: must be 1 to --services", o.Namespaces))
	}
	if o.Ports < 1 || o.Ports > len(servicePorts) {
		errs = append(errs, fmt.Errorf("--ports %d: must be 1 to %d", o.Ports, len(servicePorts)))
	}
	if o.EndpointsPer < 2 || o.EndpointsPer > 1000 {
		errs = append(errs, fmt.Errorf("--endpoints %d: must be 2 to 1000 (one is kept for churn)", o.EndpointsPer))
	}
	if o.VirtualServices < 0 || o.VirtualServices > o.Services {
		errs = append(errs, fmt.Errorf("--virtual-services %d: must be 0 to --services", o.VirtualServices))
	}
	if o.DomainSuffix == "" {
		errs = append(errs, errors.New("--domain-suffix must not be empty"))
	}
	return errors.Join(errs...)
}

type svcPort struct {
	name       string
	port       int32
	targetPort int32
	http       bool
}

var servicePorts = []svcPort{{"http", 80, 8080, true}, {"grpc", 7070, 7070, true}, {"tcp", 9000, 9000, false}}

// service is one generated service and its current endpoints.
type service struct {
	Namespace string
	Name      string
	ClusterIP string
	Endpoints []string
}

// Host is the service's FQDN.
func (s *service) host(suffix string) string {
	return s.Name + "." + s.Namespace + ".svc." + suffix
}

// World is a generated mesh kept in memory and written as Kubernetes YAML
// into a config directory (discovery serve --config-dir). Its methods
// change the directory the way an operator would: one file replaced or
// removed atomically (written under a hidden name, then renamed).
type World struct {
	opts WorldOptions
	dir  string
	// kube, when set, receives the world instead of dir.
	kube *kubeSink
	ctx  context.Context

	mu       sync.Mutex
	services []*service // by index; nil once removed
	vsEdits  map[int]int
	nextIP   uint32 // next endpoint address, 10.128.0.0/9 upwards
	nextSvc  int
}

// NewWorld generates the world into dir, which must be empty or absent.
func NewWorld(ctx context.Context, opts WorldOptions, dir string) (*World, error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("world directory %s is not empty", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return newWorld(ctx, opts, dir, nil)
}

// NewKubeWorld generates the world into the API server of kubeconfig.
func NewKubeWorld(ctx context.Context, opts WorldOptions, kubeconfig string) (*World, error) {
	k, err := newKubeSink(ctx, kubeconfig)
	if err != nil {
		return nil, err
	}
	// The control plane's namespace holds its CA Secret and Lease.
	if err := k.apply(ctx, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: istio-system\n"); err != nil {
		return nil, err
	}
	return newWorld(ctx, opts, "", k)
}

func newWorld(ctx context.Context, opts WorldOptions, dir string, k *kubeSink) (*World, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	w := &World{opts: opts, dir: dir, kube: k, ctx: ctx, vsEdits: map[int]int{}, nextIP: 10<<24 | 128<<16}
	if err := w.writeFile("namespaces.yaml", w.namespacesYAML()); err != nil {
		return nil, err
	}
	for i := 0; i < opts.Services; i++ {
		if err := w.writeService(w.newService()); err != nil {
			return nil, err
		}
	}
	for i := 0; i < opts.VirtualServices; i++ {
		if err := w.writeVS(i); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func ipString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d.%d", v>>24, v>>16&0xff, v>>8&0xff, v&0xff)
}

func (w *World) namespace(i int) string { return fmt.Sprintf("ns-%d", i%w.opts.Namespaces) }

func (w *World) newEndpoint() string {
	w.nextIP++
	if w.nextIP&0xff == 0 || w.nextIP&0xff == 0xff {
		w.nextIP += 2
	}
	return ipString(w.nextIP)
}

// newService creates the next service with fresh endpoints.
func (w *World) newService() *service {
	i := w.nextSvc
	w.nextSvc++
	s := &service{Namespace: w.namespace(i), Name: fmt.Sprintf("svc-%d", i), ClusterIP: ipString(10<<24 | 96<<16 + uint32(i) + 11)}
	for j := 0; j < w.opts.EndpointsPer; j++ {
		s.Endpoints = append(s.Endpoints, w.newEndpoint())
	}
	w.services = append(w.services, s)
	return s
}

func (w *World) serviceFile(s *service) string {
	return filepath.Join("services", s.Namespace, s.Name+".yaml")
}

func (w *World) writeService(s *service) error {
	return w.writeFile(w.serviceFile(s), w.serviceYAML(s))
}

// writeFile writes rel under the world directory atomically, or applies
// its documents to the API server.
func (w *World) writeFile(rel, content string) error {
	if w.kube != nil {
		return w.kube.apply(w.ctx, content)
	}
	path := filepath.Join(w.dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (w *World) namespacesYAML() string {
	var b strings.Builder
	for i := 0; i < w.opts.Namespaces; i++ {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns-%d\n  labels:\n    istio-injection: enabled\n", i)
	}
	return b.String()
}

func (w *World) serviceYAML(s *service) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  clusterIP: %s\n  selector:\n    app: %s\n  ports:\n",
		s.Name, s.Namespace, s.ClusterIP, s.Name)
	for _, p := range servicePorts[:w.opts.Ports] {
		fmt.Fprintf(&b, "  - name: %s\n    port: %d\n    targetPort: %d\n", p.name, p.port, p.targetPort)
	}
	fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-1\n  namespace: %s\n  labels:\n    kubernetes.io/service-name: %s\naddressType: IPv4\nports:\n",
		s.Name, s.Namespace, s.Name)
	for _, p := range servicePorts[:w.opts.Ports] {
		fmt.Fprintf(&b, "- name: %s\n  port: %d\n", p.name, p.targetPort)
	}
	b.WriteString("endpoints:\n")
	for _, a := range s.Endpoints {
		fmt.Fprintf(&b, "- addresses: [%q]\n  conditions:\n    ready: true\n  zone: zone-a\n", a)
	}
	return b.String()
}

// vsRouteName is the name of the edited route of a VirtualService: it
// changes with every edit, so a proxy has an edit when it has the name.
func vsRouteName(edit int) string { return fmt.Sprintf("edit-%d", edit) }

func (w *World) writeVS(i int) error {
	content, file := w.vsYAML(i)
	return w.writeFile(file, content)
}

// vsYAML is the VirtualService of service i and its file.
func (w *World) vsYAML(i int) (string, string) {
	s := w.services[i]
	other := w.services[(i+1)%len(w.services)]
	if other == nil {
		other = s
	}
	edit := w.vsEdits[i]
	weight := 90 - edit%80
	suffix := w.opts.DomainSuffix
	content := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: %s
  namespace: %s
spec:
  hosts:
  - %s
  http:
  - name: %s
    match:
    - uri:
        prefix: /canary
    route:
    - destination:
        host: %s
      weight: %d
    - destination:
        host: %s
      weight: %d
  - name: default
    route:
    - destination:
        host: %s
`, s.Name, s.Namespace, s.host(suffix), vsRouteName(edit), s.host(suffix), weight, other.host(suffix), 100-weight, s.host(suffix))
	return content, filepath.Join("virtualservices", s.Namespace, s.Name+".yaml")
}
