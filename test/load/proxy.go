package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/proto"
)

// typeIndex orders the per-type counters.
var typeIndex = map[string]int{typeCDS: 0, typeEDS: 1, typeLDS: 2, typeRDS: 3}

// proxy is one simulated sidecar: a real ADS client over gRPC that decodes
// everything it receives, ACKs it (or NACKs what Envoy would refuse), and
// reports to the tracker when it holds a change.
type proxy struct {
	f    *fleet
	idx  int
	node *corev3.Node

	bytes     atomic.Int64 // received on the wire
	responses [4]atomic.Int64
	nacks     atomic.Int64
	streams   atomic.Int64 // streams opened
	drops     atomic.Int64 // streams that ended without being asked to
	ready     atomic.Bool  // has held a complete configuration
	reconnect chan struct{}
}

var _ stats.Handler = (*proxy)(nil)

func (p *proxy) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (p *proxy) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		p.bytes.Add(int64(in.WireLength))
	}
}
func (p *proxy) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (p *proxy) HandleConn(context.Context, stats.ConnStats)                       {}

// run keeps a stream open until ctx ends: a reconnect request opens a new
// stream at once; a stream the server ends is reopened after a back-off.
func (p *proxy) run(ctx context.Context, cc *grpc.ClientConn) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		var asked atomic.Bool
		go func() {
			select {
			case <-p.reconnect:
				asked.Store(true)
				cancel()
			case <-sctx.Done():
			}
		}()
		p.streams.Add(1)
		err := p.stream(sctx, cc)
		cancel()
		if asked.Load() || ctx.Err() != nil {
			continue
		}
		p.drops.Add(1)
		p.f.note(fmt.Sprintf("proxy %d: stream ended: %v", p.idx, err))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (p *proxy) stream(ctx context.Context, cc *grpc.ClientConn) error {
	client := discovery.NewAggregatedDiscoveryServiceClient(cc)
	opt := grpc.MaxCallRecvMsgSize(1 << 30)
	s := newSession()
	if p.f.opts.SotW {
		st, err := client.StreamAggregatedResources(ctx, opt)
		if err != nil {
			return err
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: p.node, TypeUrl: typeCDS}); err != nil {
			return err
		}
		for {
			resp, err := st.Recv()
			if err != nil {
				return err
			}
			if err := p.onSotw(st, s, resp); err != nil {
				return err
			}
		}
	}
	st, err := client.DeltaAggregatedResources(ctx, opt)
	if err != nil {
		return err
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: p.node, TypeUrl: typeCDS}); err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		if err := p.onDelta(st, s, resp); err != nil {
			return err
		}
	}
}

// decodeAll decodes a response's resources and returns the session
// updates and the expectations met; an error is a NACK.
func (p *proxy) decodeAll(typeURL string, values [][]byte, active []*change) ([]update, []hit, error) {
	p.f.slots <- struct{}{}
	defer func() { <-p.f.slots }()
	ups := make([]update, 0, len(values))
	var hits []hit
	for _, v := range values {
		m, routes, err := decode(typeURL, v)
		if err != nil {
			return nil, nil, err
		}
		u := update{}
		switch r := m.(type) {
		case *clusterv3.Cluster:
			u.name = p.f.names.id(r.GetName())
			if n := edsName(r); n != "" {
				u.refs = []uint32{p.f.names.id(n)}
			}
		case *listenerv3.Listener:
			u.name = p.f.names.id(r.GetName())
			for _, n := range routes {
				u.refs = append(u.refs, p.f.names.id(n))
			}
		default:
			u.name = p.f.names.id(resourceName(m))
		}
		ups = append(ups, u)
		hits = check(active, p.idx, typeURL, u.name, m, hits)
	}
	return ups, hits, nil
}

func resourceName(m proto.Message) string {
	switch r := m.(type) {
	case interface{ GetClusterName() string }:
		return r.GetClusterName()
	case interface{ GetName() string }:
		return r.GetName()
	}
	return ""
}

// apply records accepted resources in the session. full says the response
// holds every resource of a wildcard type (state of the world).
func (s *session) apply(typeURL string, ups []update, full bool) {
	switch typeURL {
	case typeCDS:
		if full {
			s.setClusters(ups)
		} else {
			for _, u := range ups {
				s.removeCluster(u.name)
				s.clusters[u.name] = firstOr0(u.refs)
				if len(u.refs) > 0 {
					s.eds.ref(u.refs[0])
				}
			}
		}
		s.gotCDS = true
	case typeLDS:
		if full {
			s.setListeners(ups)
		} else {
			for _, u := range ups {
				s.removeListener(u.name)
				s.listeners[u.name] = u.refs
				for _, r := range u.refs {
					s.rds.ref(r)
				}
			}
		}
		s.gotLDS = true
	case typeEDS:
		for _, u := range ups {
			s.eds.received(u.name)
		}
	case typeRDS:
		for _, u := range ups {
			s.rds.received(u.name)
		}
	}
}

func firstOr0(ids []uint32) uint32 {
	if len(ids) == 0 {
		return 0
	}
	return ids[0]
}

func (s *session) removeCluster(id uint32) {
	if eds, ok := s.clusters[id]; ok {
		delete(s.clusters, id)
		if eds != 0 {
			s.eds.unref(eds)
		}
	}
}

func (s *session) removeListener(id uint32) {
	if refs, ok := s.listeners[id]; ok {
		delete(s.listeners, id)
		for _, r := range refs {
			s.rds.unref(r)
		}
	}
}

func (s *session) setClusters(ups []update) {
	old := s.clusters
	s.clusters = make(map[uint32]uint32, len(ups))
	for _, u := range ups {
		s.clusters[u.name] = firstOr0(u.refs)
		if len(u.refs) > 0 {
			s.eds.ref(u.refs[0])
		}
	}
	for _, eds := range old {
		if eds != 0 {
			s.eds.unref(eds)
		}
	}
}

func (s *session) setListeners(ups []update) {
	old := s.listeners
	s.listeners = make(map[uint32][]uint32, len(ups))
	for _, u := range ups {
		s.listeners[u.name] = u.refs
		for _, r := range u.refs {
			s.rds.ref(r)
		}
	}
	for _, refs := range old {
		for _, r := range refs {
			s.rds.unref(r)
		}
	}
}

// settle counts the response, then, once the ACK and any new
// subscriptions are sent, records the changes the proxy now holds.
func (p *proxy) settle(s *session, typeURL string, hits []hit, active []*change) {
	if typeURL == typeCDS || typeURL == typeLDS {
		hits = s.checkRemovals(active, p.idx, typeURL, hits)
	}
	now := time.Now()
	for _, h := range hits {
		h.c.progress[p.idx] |= h.bit
		if h.c.progress[p.idx]&h.c.full == h.c.full {
			h.c.finish(p.idx, h.c.start, now)
		}
	}
	if s.complete || !s.isComplete() {
		return
	}
	s.complete = true
	p.ready.Store(true)
	for _, c := range active {
		if c.onComplete && c.concerns(p.idx) && !s.start.Before(c.start) {
			c.finish(p.idx, s.start, now)
		}
	}
}

func (p *proxy) nack(err error) *status.Status {
	p.nacks.Add(1)
	p.f.note(fmt.Sprintf("proxy %d: NACK: %v", p.idx, err))
	return &status.Status{Code: 3, Message: err.Error()}
}

type deltaStream = grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]

func (p *proxy) onDelta(st deltaStream, s *session, resp *discovery.DeltaDiscoveryResponse) error {
	t := resp.GetTypeUrl()
	i, ok := typeIndex[t]
	if !ok {
		return fmt.Errorf("response of unexpected type %q", t)
	}
	p.responses[i].Add(1)
	active := p.f.tracker.list()
	values := make([][]byte, len(resp.GetResources()))
	for j, r := range resp.GetResources() {
		values[j] = r.GetResource().GetValue()
	}
	ups, hits, err := p.decodeAll(t, values, active)
	if err != nil {
		return st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce(), ErrorDetail: p.nack(err)})
	}
	first := (t == typeCDS && !s.gotCDS)
	s.apply(t, ups, false)
	for _, n := range resp.GetRemovedResources() {
		id := p.f.names.id(n)
		switch t {
		case typeCDS:
			s.removeCluster(id)
		case typeLDS:
			s.removeListener(id)
		case typeEDS:
			s.eds.removed(id)
		case typeRDS:
			s.rds.removed(id)
		}
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()}); err != nil {
		return err
	}
	if err := p.subscribeDelta(st, typeEDS, s.eds); err != nil {
		return err
	}
	if first { // Envoy asks for listeners once it has its clusters
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeLDS}); err != nil {
			return err
		}
	}
	if err := p.subscribeDelta(st, typeRDS, s.rds); err != nil {
		return err
	}
	p.settle(s, t, hits, active)
	return nil
}

func (p *proxy) subscribeDelta(st deltaStream, typeURL string, set *subSet) error {
	sub, unsub := set.pending()
	if len(sub) == 0 && len(unsub) == 0 {
		return nil
	}
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL}
	for _, id := range sub {
		req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, p.f.names.str(id))
	}
	for _, id := range unsub {
		req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, p.f.names.str(id))
	}
	return st.Send(req)
}

type sotwStream = grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]

func (p *proxy) onSotw(st sotwStream, s *session, resp *discovery.DiscoveryResponse) error {
	t := resp.GetTypeUrl()
	i, ok := typeIndex[t]
	if !ok {
		return fmt.Errorf("response of unexpected type %q", t)
	}
	p.responses[i].Add(1)
	active := p.f.tracker.list()
	values := make([][]byte, len(resp.GetResources()))
	for j, r := range resp.GetResources() {
		values[j] = r.GetValue()
	}
	ups, hits, err := p.decodeAll(t, values, active)
	ack := &discovery.DiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce(), VersionInfo: s.version[t]}
	if err != nil {
		ack.ErrorDetail = p.nack(err)
	} else {
		ack.VersionInfo = resp.GetVersionInfo()
		s.version[t] = resp.GetVersionInfo()
	}
	s.nonce[t] = resp.GetNonce()
	switch t {
	case typeEDS:
		ack.ResourceNames = s.eds.all(p.f.names)
	case typeRDS:
		ack.ResourceNames = s.rds.all(p.f.names)
	}
	if err != nil {
		return st.Send(ack)
	}
	first := t == typeCDS && !s.gotCDS
	s.apply(t, ups, t == typeCDS || t == typeLDS)
	if err := st.Send(ack); err != nil {
		return err
	}
	if err := p.subscribeSotw(st, s, typeEDS, s.eds); err != nil {
		return err
	}
	if first {
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: typeLDS}); err != nil {
			return err
		}
	}
	if err := p.subscribeSotw(st, s, typeRDS, s.rds); err != nil {
		return err
	}
	p.settle(s, t, hits, active)
	return nil
}

func (p *proxy) subscribeSotw(st sotwStream, s *session, typeURL string, set *subSet) error {
	sub, unsub := set.pending()
	if len(sub) == 0 && len(unsub) == 0 {
		return nil
	}
	return st.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: set.all(p.f.names),
		VersionInfo: s.version[typeURL], ResponseNonce: s.nonce[typeURL]})
}
