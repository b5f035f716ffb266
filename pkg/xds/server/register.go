package server

import (
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshplane/discovery/pkg/ca"
	"github.com/meshplane/discovery/pkg/model"
)

// HealthType is the type URL of the health reports Istio's agent sends
// on its ADS stream for a workload it probes (istiod's
// model.HealthInfoType): a request with no error detail says healthy, one
// with error detail says unhealthy and why. It is never answered.
const HealthType = "type.googleapis.com/istio.v1.HealthInformation"

// Registrar is told of the streams of the proxies it may register in the
// mesh (WorkloadEntry auto-registration, pkg/autoregister). Its methods
// are called on the xDS path with a stream's lock held: they must return
// at once (queue, never block, never call back into the Server). The
// server only holds streams; what is written where is the Registrar's.
type Registrar interface {
	// Connect is called once per stream, when its proxy is identified;
	// caller is the stream's verified identity (nil on the plaintext
	// port). It reports whether the Registrar tracks the stream (Health
	// and Disconnect follow only then); an error refuses the stream and
	// is returned to the proxy, so it must be a gRPC status error whose
	// message says what to fix.
	Connect(p *model.Proxy, caller *ca.Identity, connectedAt time.Time) (bool, error)
	// Health passes on a health report of a tracked stream's proxy.
	Health(p *model.Proxy, healthy bool, message string, at time.Time)
	// Disconnect is called once when a tracked stream ends.
	Disconnect(p *model.Proxy, at time.Time)
}

// SetRegistrar makes r learn of the streams whose proxies connect, report
// their health and leave. Call it before serving.
func (s *Server) SetRegistrar(r Registrar) { s.registrar = r }

// register tells the Registrar of c's newly identified proxy p. Called with
// c.mu held.
func (c *conn) register(p *model.Proxy) error {
	if c.s.registrar == nil {
		return nil
	}
	tracked, err := c.s.registrar.Connect(p, c.caller, c.connected)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Internal, err.Error())
		}
		return err
	}
	c.registered = tracked
	return nil
}

// health passes on a health report (a request of HealthType). Called with
// c.mu held.
func (c *conn) health(req any) {
	if !c.registered || c.proxy == nil {
		return
	}
	var detail interface{ GetMessage() string }
	switch r := req.(type) {
	case *discovery.DiscoveryRequest:
		if d := r.GetErrorDetail(); d != nil {
			detail = d
		}
	case *discovery.DeltaDiscoveryRequest:
		if d := r.GetErrorDetail(); d != nil {
			detail = d
		}
	}
	if detail == nil {
		c.s.registrar.Health(c.proxy, true, "", time.Now())
		return
	}
	c.s.registrar.Health(c.proxy, false, detail.GetMessage(), time.Now())
}

// unregister tells the Registrar that c ended. Called with c.mu held.
func (c *conn) unregister() {
	if c.registered {
		c.registered = false
		c.s.registrar.Disconnect(c.proxy, time.Now())
	}
}
