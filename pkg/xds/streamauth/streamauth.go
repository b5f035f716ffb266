// Package streamauth decides who may hold an xDS stream on the TLS port.
//
// In: every streaming RPC on the :15012 gRPC server, and the node each
// discovery request names. Out: the stream runs only when its caller is
// authenticated (a client certificate from our CA, or a Kubernetes
// service-account token checked by TokenReview) and the node it claims is in
// the caller's namespace (and, when the node names one, is its service
// account), as Istio checks it; a request for one of Istio's debug types
// names no proxy, and only its NAMESPACE and SERVICE_ACCOUNT metadata must
// be the caller's. A refusal gives the client an opaque status
// and the log the reason. While the server drains, new streams are refused
// with Unavailable so that proxies go to another replica.
package streamauth

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/model"
)

// Authenticator proves the caller of a call; *ca.CA is one.
type Authenticator interface {
	// Authenticate returns the caller's identity and the method that proved
	// it; an error's detail is for the log only.
	Authenticate(ctx context.Context) (ca.Identity, string, error)
}

var _ Authenticator = (*ca.CA)(nil)

// Messages the caller sees: the same for every reason.
const (
	msgUnauthenticated = "authentication failed"
	msgDenied          = "permission denied"
	msgDraining        = "server is shutting down; reconnect"
)

// Guard is the stream interceptor of the TLS gRPC server.
type Guard struct {
	authn    Authenticator
	log      *slog.Logger
	draining atomic.Bool
	refused  *prometheus.CounterVec
	logs     *RefusalLog
}

// New returns a Guard. Its refusals are counted in
// pilot_xds_auth_failures_total{reason}.
func New(authn Authenticator, log *slog.Logger, reg prometheus.Registerer) *Guard {
	g := &Guard{authn: authn, log: log, logs: NewRefusalLog(log), refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pilot_xds_auth_failures_total",
		Help: "xDS streams refused on the TLS port, by reason (unauthenticated, identity_mismatch, invalid_node, draining).",
	}, []string{"reason"})}
	reg.MustRegister(g.refused)
	return g
}

// Drain makes the Guard refuse every new stream from now on.
func (g *Guard) Drain() { g.draining.Store(true) }

// DrainInterceptor refuses new xDS streams once the Guard drains; for the
// plaintext server, which authenticates nobody.
func (g *Guard) DrainInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if isXDS(info.FullMethod) && g.draining.Load() {
			g.refused.WithLabelValues("draining").Inc()
			return status.Error(codes.Unavailable, msgDraining)
		}
		return handler(srv, ss)
	}
}

// isXDS reports whether a method is one of the discovery services'.
func isXDS(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/envoy.service.")
}

// StreamInterceptor authenticates each xDS stream and checks every node it
// names. Other streaming methods pass through.
func (g *Guard) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !isXDS(info.FullMethod) {
			return handler(srv, ss)
		}
		if g.draining.Load() {
			g.refused.WithLabelValues("draining").Inc()
			return status.Error(codes.Unavailable, msgDraining)
		}
		id, method, err := g.authn.Authenticate(ss.Context())
		if err != nil {
			g.refused.WithLabelValues("unauthenticated").Inc()
			g.logs.Warn("unauthenticated", "xDS stream refused: not authenticated", "method", info.FullMethod, "err", model.Clip(err.Error()))
			return status.Error(codes.Unauthenticated, msgUnauthenticated)
		}
		cs := &checkedStream{
			ServerStream: ss, g: g, id: id, via: method,
			ctx: context.WithValue(ss.Context(), callerKey{}, id),
		}
		err = handler(srv, cs)
		// go-control-plane ends a stream whose Recv fails without passing
		// the error on: the refusal is returned here, so the client sees it.
		if refusal := cs.refusal.Load(); refusal != nil {
			return *refusal
		}
		return err
	}
}

// callerKey is the context key of a stream's verified identity.
type callerKey struct{}

// Caller returns the verified identity of the stream whose context ctx
// is: set only for streams this package authenticated. A stream without
// one (the plaintext port) must never be sent credentials.
func Caller(ctx context.Context) (ca.Identity, bool) {
	id, ok := ctx.Value(callerKey{}).(ca.Identity)
	return id, ok
}

// checkedStream checks the node of every request it receives.
type checkedStream struct {
	grpc.ServerStream
	ctx     context.Context // carries the caller (Caller)
	g       *Guard
	id      ca.Identity
	via     string
	checked string // the node ID already checked
	refusal atomic.Pointer[error]
}

// Context is the stream's context with the verified caller.
func (s *checkedStream) Context() context.Context { return s.ctx }

// RecvMsg receives a request and refuses the stream when the request's
// node is not the caller's.
func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	var node *core.Node
	var typeURL string
	switch r := m.(type) {
	case *discovery.DiscoveryRequest:
		node, typeURL = r.GetNode(), r.GetTypeUrl()
	case *discovery.DeltaDiscoveryRequest:
		node, typeURL = r.GetNode(), r.GetTypeUrl()
	}
	if node == nil || node.GetId() == s.checked {
		// Envoy names its node in the first request only.
		return nil
	}
	check := s.check
	if isDebugType(typeURL) {
		check = s.checkDebugCaller
	}
	if err := check(node); err != nil {
		s.refusal.Store(&err)
		return err
	}
	return nil
}

func (s *checkedStream) check(node *core.Node) error {
	proxy, err := model.ParseProxy(node.GetId(), node.GetMetadata().AsMap())
	if err != nil {
		// The xDS server reports a malformed node to the client itself.
		s.g.refused.WithLabelValues("invalid_node").Inc()
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if proxy.Namespace != s.id.Namespace ||
		(proxy.Metadata.ServiceAccount != "" && proxy.Metadata.ServiceAccount != s.id.ServiceAccount) {
		s.g.refused.WithLabelValues("identity_mismatch").Inc()
		s.g.logs.Warn("identity_mismatch", "xDS stream refused: the node is not the caller's",
			"node", model.Clip(node.GetId()), "nodeNamespace", model.Clip(proxy.Namespace), "nodeServiceAccount", model.Clip(proxy.Metadata.ServiceAccount),
			"caller", s.id.SPIFFEID(), "authenticatedBy", s.via)
		return status.Error(codes.PermissionDenied, msgDenied)
	}
	s.checked = node.GetId()
	return nil
}

// isDebugType reports whether t is one of Istio's debug types
// (istio.io/debug, istio.io/debug/syncz, ...), which istioctl asks for on
// a stream of its own, with a node that stands for no proxy.
func isDebugType(t string) bool {
	return t == "istio.io/debug" || strings.HasPrefix(t, "istio.io/debug/")
}

// checkDebugCaller checks the node of a debug request as istiod does: its
// NAMESPACE metadata (and SERVICE_ACCOUNT, when set) must be the caller's.
// Its node ID names no proxy (istioctl sends sidecar~<ip>~test-1.default~
// default.svc.cluster.local whatever its namespace), so it is not read,
// and the stream is not marked checked: a later request for configuration
// is checked in full.
func (s *checkedStream) checkDebugCaller(node *core.Node) error {
	meta := node.GetMetadata().GetFields()
	ns := meta[model.MetaNamespace].GetStringValue()
	sa := meta[model.MetaServiceAccount].GetStringValue()
	if ns != s.id.Namespace || (sa != "" && sa != s.id.ServiceAccount) {
		s.g.refused.WithLabelValues("identity_mismatch").Inc()
		s.g.logs.Warn("identity_mismatch", "debug xDS stream refused: its node is not the caller's",
			"nodeNamespace", model.Clip(ns), "nodeServiceAccount", model.Clip(sa), "caller", s.id.SPIFFEID(), "authenticatedBy", s.via)
		return status.Error(codes.PermissionDenied, msgDenied)
	}
	return nil
}
