package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/model"
)

// Istio's debug types over xDS, as istiod serves them: what istioctl
// proxy-status and version (and x internal-debug) ask for on an ADS
// stream of their own, instead of configuration.
//
//   - istio.io/debug/syncz: one envoy.service.status.v3.ClientConfig per
//     connected proxy (node ID <pod>.<namespace>, metadata CLUSTER_ID,
//     NAMESPACE and ISTIO_VERSION, one GenericXdsConfig per type with
//     SYNCED, STALE, NOT_SENT or ERROR), and the response's control_plane
//     identifier naming this replica and its build;
//   - istio.io/debug/config_dump, resource name <pod>.<namespace> (or the
//     full node ID): the proxy's configuration as Envoy's admin
//     ConfigDump's configs;
//   - istio.io/debug, resource name a /debug page ("syncz",
//     "config_dump?proxyID=..."): the page's body.
//
// Only authenticated callers are answered: on the TLS port streamauth has
// verified who the caller is; on the plaintext port a debug request ends
// the stream with Unauthenticated, as istiod (ENABLE_DEBUG_ENDPOINT_AUTH,
// its default) does. A caller of the control plane's namespace, or of
// Options.DebugNamespaces, sees every proxy; any other caller sees only
// the proxies of its own namespace and may not read /debug pages. A stream
// that asks for a debug type is not a proxy: it is never sent
// configuration and not shown in syncz.

// Istio's debug type URLs.
const (
	TypeDebug           = "istio.io/debug"
	TypeDebugSyncz      = TypeDebug + "/syncz"
	TypeDebugConfigDump = TypeDebug + "/config_dump"
)

func isDebugType(t string) bool { return t == TypeDebug || strings.HasPrefix(t, TypeDebug+"/") }

// debugRequest admits a request for a debug type on c. Called with c.mu
// held.
func (c *conn) debugRequest(typeURL string) error {
	if c.key.delta {
		return status.Error(codes.Unimplemented, "Istio's debug types are served over state-of-the-world ADS")
	}
	if c.caller == nil {
		c.s.refusals.Warn("debug_unauthenticated", "refused a debug xDS request: the stream is not authenticated (plaintext port)", "type", typeURL)
		return status.Error(codes.Unauthenticated, "authentication required: Istio's debug types are served on the TLS port")
	}
	if c.proxy == nil {
		c.debugOnly = true
	}
	return nil
}

// debugWatch answers a debug request unless it only acknowledges the
// last answer (same names): debug responses are not pushed.
func (c *conn) debugWatch(req *cachev3.Request, ch chan cachev3.Response) (func(), error) {
	t := req.GetTypeUrl()
	names := slices.Clone(req.GetResourceNames())
	slices.Sort(names)
	c.mu.Lock()
	ts := c.of(t)
	if ts.req == req {
		ts.req = nil
	}
	if ts.answered && slices.Equal(ts.debugAnswered, names) || c.caller == nil {
		c.mu.Unlock()
		return func() {}, nil
	}
	ts.debugAnswered, ts.answered = names, true
	caller := *c.caller
	c.mu.Unlock()
	// Built without c.mu: it reads every other stream.
	resp, err := c.s.debugResponse(t, names, caller)
	if err != nil {
		c.s.refusals.Warn("debug_refused", "refused a debug xDS request", "type", t, "caller", caller.SPIFFEID(), "err", err)
		return nil, err
	}
	select {
	case ch <- &cachev3.PassthroughResponse{Request: req, DiscoveryResponse: resp, ReturnedResources: map[string]string{}}:
	default:
		c.logger().Error("xDS response channel full; debug response dropped", "type", t)
	}
	return func() {}, nil
}

// debugScope is the namespace a caller is limited to; "" sees everything.
func (s *Server) debugScope(caller ca.Identity) string {
	if caller.Namespace == s.opts.SystemNamespace || slices.Contains(s.opts.DebugNamespaces, caller.Namespace) {
		return ""
	}
	return caller.Namespace
}

func (s *Server) debugResponse(t string, names []string, caller ca.Identity) (*discovery.DiscoveryResponse, error) {
	scope := s.debugScope(caller)
	resp := &discovery.DiscoveryResponse{TypeUrl: t, VersionInfo: strconv.FormatUint(s.world.World().Version, 10)}
	switch t {
	case TypeDebugSyncz:
		resp.ControlPlane = s.controlPlane
		cfgs, err := s.clientConfigs(scope)
		if err != nil {
			return nil, status.Error(codes.Internal, "cannot render the sync status")
		}
		resp.Resources = cfgs
	case TypeDebugConfigDump:
		// istiod answers a malformed or unknown name with no resources,
		// so that a client asking every replica tries the next one.
		if len(names) != 1 {
			return resp, nil
		}
		c := s.findProxy(names[0], scope)
		if c == nil {
			return resp, nil
		}
		dump, err := c.configDump()
		if err != nil {
			s.log.Error("config dump", "proxy", model.Clip(names[0]), "error", err)
			return nil, status.Error(codes.Internal, "cannot render the configuration")
		}
		resp.Resources = dump.Configs
	case TypeDebug:
		if scope != "" {
			return nil, status.Errorf(codes.PermissionDenied, "debug pages are for callers of namespace %s", s.opts.SystemNamespace)
		}
		if len(names) != 1 {
			return nil, status.Error(codes.InvalidArgument, "exactly one debug page is required")
		}
		body, err := s.debugPage(names[0])
		if err != nil {
			return nil, err
		}
		resp.Resources = []*anypb.Any{{TypeUrl: TypeDebug, Value: body}}
	}
	return resp, nil
}

// clientConfigs is syncz as istiod sends it: a ClientConfig per proxy of
// scope (every namespace when ""), sorted by proxy.
func (s *Server) clientConfigs(scope string) ([]*anypb.Any, error) {
	var cfgs []*statusv3.ClientConfig
	s.conns.Range(func(_, v any) bool {
		c := v.(*conn)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.proxy == nil || (scope != "" && c.proxy.Namespace != scope) {
			return true
		}
		cfgs = append(cfgs, c.clientConfig())
		return true
	})
	slices.SortFunc(cfgs, func(a, b *statusv3.ClientConfig) int { return strings.Compare(a.Node.Id, b.Node.Id) })
	out := make([]*anypb.Any, 0, len(cfgs))
	for _, cc := range cfgs {
		a, err := anypb.New(cc)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// clientConfig is c's row of syncz. Called with c.mu held.
func (c *conn) clientConfig() *statusv3.ClientConfig {
	p := c.proxy
	meta := &structpb.Struct{Fields: map[string]*structpb.Value{
		model.MetaNamespace: structpb.NewStringValue(p.Namespace),
	}}
	if v := p.Metadata.ClusterID; v != "" {
		meta.Fields[model.MetaClusterID] = structpb.NewStringValue(v)
	}
	if v := p.Metadata.IstioVersion; v != "" {
		meta.Fields[model.MetaIstioVersion] = structpb.NewStringValue(v)
	}
	cc := &statusv3.ClientConfig{Node: &corev3.Node{Id: istioProxyID(p), Metadata: meta}}
	for _, t := range sortedKeys(c.types) {
		st := c.types[t].status
		if st == nil {
			continue
		}
		x := &statusv3.ClientConfig_GenericXdsConfig{TypeUrl: t, ConfigStatus: configStatus(st)}
		if !st.Sent.IsZero() {
			x.LastUpdated = timestamppb.New(st.Sent)
		}
		if x.ConfigStatus == statusv3.ConfigStatus_ERROR {
			x.ErrorState = &adminv3.UpdateFailureState{LastUpdateAttempt: timestamppb.New(st.LastNACK.Time), Details: st.LastNACK.Message}
		}
		cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, x)
	}
	return cc
}

// configStatus is istiod's reading of one type: ERROR when the last
// response was rejected, NOT_SENT, SYNCED when it was acknowledged, STALE
// while it is not.
func configStatus(st *typeStatus) statusv3.ConfigStatus {
	switch {
	case st.SentNonce == "":
		return statusv3.ConfigStatus_NOT_SENT
	case st.LastNACK != nil && st.LastNACK.Nonce == st.SentNonce:
		return statusv3.ConfigStatus_ERROR
	case st.AckedNonce == st.SentNonce:
		return statusv3.ConfigStatus_SYNCED
	default:
		return statusv3.ConfigStatus_STALE
	}
}

// istioProxyID is how istiod and istioctl name a proxy: <pod>.<namespace>,
// the third field of its node ID.
func istioProxyID(p *model.Proxy) string { return p.PodName + "." + p.Namespace }

// findProxy returns the stream of the proxy named id (its full node ID or
// <pod>.<namespace>) within scope that has a configuration, the newest if
// it is connected more than once; nil if there is none.
func (s *Server) findProxy(id, scope string) *conn {
	var found *conn
	s.conns.Range(func(_, v any) bool {
		c := v.(*conn)
		c.mu.Lock()
		ok := c.proxy != nil && c.cfg != nil && (c.proxy.ID == id || istioProxyID(c.proxy) == id) &&
			(scope == "" || c.proxy.Namespace == scope)
		c.mu.Unlock()
		if ok && (found == nil || c.connected.After(found.connected)) {
			found = c
		}
		return true
	})
	return found
}

// debugPage renders /debug/<name> from the monitoring server's mux.
func (s *Server) debugPage(name string) ([]byte, error) {
	if s.debugMux == nil {
		return nil, status.Error(codes.Unavailable, "no debug pages")
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "/debug/"+name, nil)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "debug page %q: %v", model.Clip(name), err)
	}
	w := &capture{header: http.Header{}}
	h, _ := s.debugMux.Handler(req)
	h.ServeHTTP(w, req)
	return w.body.Bytes(), nil
}

// capture is an http.ResponseWriter that keeps the body.
type capture struct {
	header http.Header
	body   bytes.Buffer
}

func (w *capture) Header() http.Header         { return w.header }
func (w *capture) Write(b []byte) (int, error) { return w.body.Write(b) }
func (w *capture) WriteHeader(int)             {}

// controlPlaneInstance and buildInfo are the JSON of istiod's control
// plane identifier (its IstioControlPlaneInstance and version.BuildInfo).
type controlPlaneInstance struct {
	Component string
	ID        string
	Info      buildInfo
}

type buildInfo struct {
	Version       string `json:"version"`
	GitRevision   string `json:"revision"`
	GolangVersion string `json:"golang_version"`
	BuildStatus   string `json:"status"`
	GitTag        string `json:"tag"`
}

// controlPlaneID is the identifier of inst. The component is "istiod":
// the role discovery plays, which is what Istio's tools call it.
func controlPlaneID(inst Instance) (*corev3.ControlPlane, error) {
	b, err := json.Marshal(controlPlaneInstance{
		Component: "istiod", ID: inst.ID,
		Info: buildInfo{inst.Version, inst.GitRevision, inst.GoVersion, inst.BuildStatus, inst.GitTag},
	})
	if err != nil {
		return nil, fmt.Errorf("control plane identifier: %w", err)
	}
	return &corev3.ControlPlane{Identifier: string(b)}, nil
}
