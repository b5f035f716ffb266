package server

import (
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// What one stream may cost. The plaintext port authenticates nobody and
// the TLS port checks a node only after its first request, so every
// bound holds for any caller: a stream's node (ID and metadata) is at
// most MaxNodeBytes, it subscribes to at most MaxNames names of a type
// and at most MaxUnknownNames of a type that its configuration does not
// hold (a proxy only asks for what
// it was sent, so unknown names are what a careless or hostile client
// costs; known ones share the class's strings, see intern), and the
// replica holds at most MaxStreams streams. A stream over a bound ends
// with ResourceExhausted (too many streams) or InvalidArgument, naming
// the bound; discovery_xds_streams_refused_total{reason} counts them.
// Streams per connection are bounded by the gRPC servers
// (MaxConcurrentStreams, the serve command's
// --xds-max-streams-per-connection).

// Refusal reasons, the counter's label.
const (
	refuseTooManyStreams = "too_many_streams"
	refuseNodeTooLarge   = "node_too_large"
	refuseNodeIDTooLong  = "node_id_too_long"
	refuseTooManyNames   = "too_many_names"
	refuseUnknownNames   = "too_many_unknown_names"
)

// streamCount counts open streams against Options.MaxStreams.
type streamCount struct{ n atomic.Int64 }

// admit takes a slot for a new stream, or refuses it.
func (s *Server) admit() error {
	if n := s.streams.n.Add(1); s.opts.MaxStreams > 0 && n > int64(s.opts.MaxStreams) {
		s.streams.n.Add(-1)
		s.refuse(refuseTooManyStreams)
		return status.Errorf(codes.ResourceExhausted, "this replica holds its maximum of %d xDS streams; connect to another", s.opts.MaxStreams)
	}
	return nil
}

func (s *Server) release() { s.streams.n.Add(-1) }

func (s *Server) refuse(reason string) { s.m.streamsRefused.WithLabelValues(reason).Inc() }

// checkNode bounds a request's node. Called for every request that
// carries one: go-control-plane keeps the latest.
func (s *Server) checkNode(node *corev3.Node) error {
	if node == nil {
		return nil
	}
	if max := s.opts.MaxNodeIDBytes; max > 0 && len(node.GetId()) > max {
		s.refuse(refuseNodeIDTooLong)
		return status.Errorf(codes.InvalidArgument, "node ID of %d bytes is over the limit of %d", len(node.GetId()), max)
	}
	if max := s.opts.MaxNodeBytes; max > 0 {
		if n := proto.Size(node); n > max {
			s.refuse(refuseNodeTooLarge)
			return status.Errorf(codes.InvalidArgument, "node (ID and metadata) of %d bytes is over the limit of %d", n, max)
		}
	}
	return nil
}

// checkNames bounds the names a request leaves the stream subscribed to,
// in all and those c's configuration does not hold (misses of them are in
// the request, see intern). Called with c.mu held, before go-control-plane
// applies the request.
func (c *conn) checkNames(typeURL string, req any, misses int) error {
	o := c.s.opts
	total, unknown := 0, misses
	switch r := req.(type) {
	case *discovery.DiscoveryRequest:
		total = len(r.GetResourceNames())
	case *discovery.DeltaDiscoveryRequest:
		if len(r.GetResourceNamesSubscribe()) == 0 {
			return nil
		}
		// The stream's set after the request: what it held and the names
		// new to it (a name subscribed again counts once).
		ts := c.of(typeURL)
		total = len(ts.dnew)
		if ts.dsub != nil {
			total += ts.dsub.names.len()
		}
		// The names held are counted only when the request adds unknown
		// ones: a request that adds none cannot raise what the client
		// guessed (held names the configuration dropped since are a
		// proxy's lag), and counting walked every subscribed name on
		// every subscription change, 5% of the server's time after a
		// service was added at M1. Nothing is counted when the names in
		// all are within the bound: the unknown ones are some of them.
		// Looking up each name of every first subscription was 3% of
		// the server's time while 1,000 proxies connected.
		if o.MaxUnknownNames > 0 && total > o.MaxUnknownNames {
			if unknown = c.unknown(typeURL, ts.dnew); unknown > 0 {
				unknown += c.unknownHeld(typeURL)
			}
		}
	}
	if o.MaxNames > 0 && total > o.MaxNames {
		c.s.refuse(refuseTooManyNames)
		return status.Errorf(codes.InvalidArgument, "%d %s names subscribed; the limit is %d", total, gen.ShortType(typeURL), o.MaxNames)
	}
	if o.MaxUnknownNames <= 0 || typeURL == gen.SecretType || !knownType(typeURL) {
		return nil
	}
	if unknown > o.MaxUnknownNames {
		c.s.refuse(refuseUnknownNames)
		return status.Errorf(codes.InvalidArgument, "%d subscribed %s names are not in this proxy's configuration; the limit is %d",
			unknown, gen.ShortType(typeURL), o.MaxUnknownNames)
	}
	return nil
}

// unknown counts the names that c's configuration does not hold.
func (c *conn) unknown(typeURL string, names []string) int {
	n := 0
	for _, name := range names {
		if c.cfg == nil || !c.cfg.Has(typeURL, name) {
			n++
		}
	}
	return n
}

// unknownHeld counts the names a delta stream already subscribes to that
// c's configuration does not hold. Before the configuration is known every
// name is unknown: a proxy names resources only once it was sent what
// names them (Envoy's first requests are wildcards, grpc-go's name its few
// targets), so only a client that guesses names, by the thousand, meets
// the bound there.
func (c *conn) unknownHeld(typeURL string) int {
	sub := c.of(typeURL).dsub
	if sub == nil {
		return 0
	}
	n := 0
	for name := range sub.names.all() {
		if c.cfg == nil || !c.cfg.Has(typeURL, name) {
			n++
		}
	}
	return n
}
