package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshplane/discovery/pkg/autoregister"
	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/config"
	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/config/kube"
	"github.com/meshplane/discovery/pkg/config/meshconfig"
	"github.com/meshplane/discovery/pkg/gatewaydeploy"
	"github.com/meshplane/discovery/pkg/jwks"
	"github.com/meshplane/discovery/pkg/leader"
	"github.com/meshplane/discovery/pkg/monitor"
	"github.com/meshplane/discovery/pkg/status"
	"github.com/meshplane/discovery/pkg/webhook/inject"
	webhookserver "github.com/meshplane/discovery/pkg/webhook/server"
	xdsserver "github.com/meshplane/discovery/pkg/xds/server"
)

// serveOptions are the flags of `discovery serve`.
type serveOptions struct {
	kubeconfig   string
	namespace    string
	revision     string
	trustDomain  string
	domainSuffix string
	grpcAddr     string
	secureAddr   string
	logLevel     string
	logFormat    string
	drainPeriod  time.Duration
	maxStreamAge time.Duration
	// trustDomainFlag is set when --trust-domain is given on the command
	// line: it then wins over the MeshConfig's trustDomain.
	trustDomainFlag bool

	file     file.Options
	kube     kube.Options
	mesh     meshconfig.Options
	ca       ca.Options
	monitor  monitor.Options
	leader   leader.Options
	xds      xdsserver.Options
	webhook  webhookserver.Options
	inject   inject.Options
	patcher  webhookserver.PatcherOptions
	status   status.Options
	jwks     jwks.Options
	autoreg  autoregister.Options
	gwDeploy gatewaydeploy.Options
}

func defaultServeOptions() *serveOptions {
	return &serveOptions{
		namespace:    "istio-system",
		trustDomain:  "cluster.local",
		domainSuffix: "cluster.local",
		grpcAddr:     ":15010",
		secureAddr:   ":15012",
		logLevel:     "info",
		logFormat:    "text",
		drainPeriod:  20 * time.Second,
		maxStreamAge: 30 * time.Minute,
		file:         file.DefaultOptions(),
		kube:         kube.DefaultOptions(),
		ca:           ca.DefaultOptions(),
		monitor:      monitor.DefaultOptions(),
		leader:       leader.DefaultOptions(),
		xds:          xdsserver.DefaultOptions(),
		webhook:      webhookserver.DefaultOptions(),
		status:       status.DefaultOptions(),
		jwks:         jwks.DefaultOptions(),
		autoreg:      autoregister.DefaultOptions(),
		gwDeploy:     gatewaydeploy.DefaultOptions(),
	}
}

func newServeCommand() *cobra.Command {
	o := defaultServeOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane: xDS, CA, webhooks, metrics",
		Long: `Run the control plane.

With --kubeconfig, or inside a Kubernetes Pod, it reads Services, EndpointSlices,
Pods, Namespaces and Istio's configuration from the API server. With
--config-dir DIR and no cluster, it serves the same from Kubernetes-style YAML
files in DIR, watched for changes.`,
		Example: "  discovery serve --config-dir examples/basic\n  discovery serve --kubeconfig ~/.kube/config --namespace istio-system",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.trustDomainFlag = cmd.Flags().Changed("trust-domain")
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Path of a kubeconfig file. Without it, the in-cluster configuration is used when running in a Pod; otherwise there is no cluster (use --config-dir).")
	fs.StringVar(&o.namespace, "namespace", o.namespace, "Namespace the control plane runs in: its Secrets, Lease and webhook names live there.")
	fs.StringVar(&o.revision, "revision", o.revision, "Control plane revision (istio.io/rev); empty for the default revision.")
	fs.StringVar(&o.trustDomain, "trust-domain", o.trustDomain, "SPIFFE trust domain of workload identities (spiffe://<trust-domain>/ns/<ns>/sa/<sa>). Given on the command line, it wins over the MeshConfig's trustDomain; otherwise the MeshConfig's, read at start-up, applies.")
	fs.StringVar(&o.domainSuffix, "domain-suffix", o.domainSuffix, "DNS suffix of the cluster: services are <name>.<namespace>.svc.<suffix>.")
	fs.StringVar(&o.grpcAddr, "grpc-address", o.grpcAddr, "Address of the plaintext gRPC server (xDS) for trusted networks and local use; empty turns it off.")
	fs.StringVar(&o.secureAddr, "secure-grpc-address", o.secureAddr, "Address of the TLS gRPC server: xDS and the CA (IstioCertificateService).")
	fs.DurationVar(&o.drainPeriod, "drain-period", o.drainPeriod, "On SIGTERM, close the open xDS streams one by one over this period, so proxies move to other replicas a few at a time; then exit.")
	fs.DurationVar(&o.maxStreamAge, "max-stream-age", o.maxStreamAge, "Ask a proxy to reconnect after its connection is this old (+/-10% jitter), which spreads proxies across replicas over time; 0 turns it off.")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "Log level: debug, info, warn or error.")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "Log format: text or json.")
	o.file.AddFlags(fs)
	o.kube.AddFlags(fs)
	o.mesh.AddFlags(fs)
	o.ca.AddFlags(fs)
	o.monitor.AddFlags(fs)
	o.leader.AddFlags(fs)
	o.xds.AddFlags(fs)
	o.webhook.AddFlags(fs)
	o.inject.AddFlags(fs)
	o.patcher.AddFlags(fs)
	o.status.AddFlags(fs)
	o.jwks.AddFlags(fs)
	o.autoreg.AddFlags(fs)
	o.gwDeploy.AddFlags(fs)
	return cmd
}

func (o *serveOptions) validate() error {
	var errs []error
	if _, err := parseLevel(o.logLevel); err != nil {
		errs = append(errs, err)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: must be text or json", o.logFormat))
	}
	if o.namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if o.domainSuffix == "" || strings.HasPrefix(o.domainSuffix, ".") || strings.HasSuffix(o.domainSuffix, ".") {
		errs = append(errs, fmt.Errorf("--domain-suffix %q: must be a DNS suffix such as cluster.local", o.domainSuffix))
	}
	if o.drainPeriod < 0 || o.maxStreamAge < 0 || (o.maxStreamAge > 0 && o.maxStreamAge < time.Minute) {
		errs = append(errs, fmt.Errorf("--drain-period (%s) must not be negative; --max-stream-age (%s) must be 0 or at least 1m", o.drainPeriod, o.maxStreamAge))
	}
	if o.secureAddr == "" {
		errs = append(errs, errors.New("--secure-grpc-address must not be empty: the CA is served there"))
	}
	o.mesh.Namespace, o.mesh.Revision = o.namespace, o.revision
	o.setTrustDomain(o.trustDomain)
	o.ca.Namespace, o.ca.Revision = o.namespace, o.revision
	o.xds.SystemNamespace, o.xds.Instance = o.namespace, xdsInstance()
	o.inject.Namespace, o.inject.Revision = o.namespace, o.revision
	o.patcher.Namespace, o.patcher.Revision = o.namespace, o.revision
	o.autoreg.Replica, o.autoreg.MaxConnectionAge = instanceName(), o.maxStreamAge
	o.gwDeploy.Revision, o.gwDeploy.DomainSuffix = o.revision, o.domainSuffix
	for _, v := range []interface{ Validate() error }{&o.file, &o.kube, &o.mesh, &o.monitor, &o.leader, &o.xds, &o.webhook, &o.inject, &o.patcher, &o.status, &o.jwks, &o.autoreg, &o.gwDeploy} {
		if err := v.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setTrustDomain puts td in force for the CA, xDS and the MeshConfig
// watcher's report.
func (o *serveOptions) setTrustDomain(td string) {
	o.trustDomain = td
	o.ca.TrustDomain, o.xds.TrustDomain = td, td
	o.mesh.TrustDomain, o.mesh.TrustDomainFlag = td, o.trustDomainFlag
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: must be debug, info, warn or error", s)
	}
	return l, nil
}

func (o *serveOptions) logger() *slog.Logger {
	level, _ := parseLevel(o.logLevel)
	hopts := &slog.HandlerOptions{Level: level}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, hopts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, hopts))
}

// restConfig finds the cluster: --kubeconfig, else the in-cluster config,
// else none (nil, nil).
func (o *serveOptions) restConfig() (*rest.Config, error) {
	if o.kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, nil
	}
	return cfg, err
}

// defaultCADir is where file mode keeps its CA when --ca-dir is not given.
func defaultCADir() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no --ca-dir and no home directory for the default: %w", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "discovery", "ca"), nil
}

// sources builds the config sources: the cluster's, the directory's, or both.
func (o *serveOptions) sources(clients *kube.Clients, log *slog.Logger, reg prometheus.Registerer) ([]config.Source, *file.Source, error) {
	var out []config.Source
	var fs *file.Source
	if clients != nil {
		if o.mesh.File == "" {
			// istiod reads the ConfigMap only without a mesh file.
			o.kube.MeshNamespace, o.kube.MeshConfigMap = o.namespace, o.mesh.ConfigMapName()
		}
		ks, err := kube.NewForClients(*clients, o.kube, log, reg)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, ks)
	}
	if o.file.Enabled() {
		var err error
		if fs, err = file.New(o.file, log, reg); err != nil {
			return nil, nil, err
		}
		out = append(out, fs)
	}
	if len(out) == 0 {
		log.Warn("no cluster and no --config-dir: serving an empty mesh")
	}
	return out, fs, nil
}

// instanceName names this replica as Istio's tools know it: its Pod's
// name (POD_NAME, which Istio's charts set, or the hostname, which is the
// Pod's name in a Pod).
func instanceName() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "discovery"
	}
	return host
}

// xdsInstance is what Istio's debug types say of this replica and build.
func xdsInstance() xdsserver.Instance {
	v := currentVersion()
	return xdsserver.Instance{
		ID: instanceName(), Version: v.Version, GitRevision: v.GitCommit,
		GoVersion: v.GoVersion, BuildStatus: v.BuildStatus(), GitTag: v.Version,
	}
}

// identity names this replica in the leader Lease.
func identity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "discovery"
	}
	return fmt.Sprintf("%s_%d", host, os.Getpid())
}

func newKubeClient(cfg *rest.Config) (kubernetes.Interface, error) {
	if cfg == nil {
		return nil, nil
	}
	return kubernetes.NewForConfig(cfg)
}
