package loadkit

import (
	"context"
	"fmt"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
)

// The ADS streams of a proxy: delta (as Envoy, in Envoy's order: clusters,
// their endpoints, listeners, their routes), state of the world, and the
// stream of a proxy that never answers.

var recvOpt = grpc.MaxCallRecvMsgSize(1 << 30)

// callOptions are the options of a proxy's ADS stream: the light modes
// read responses with lightCodec.
func (p *proxy) callOptions() []grpc.CallOption {
	if p.f.opts.Decode == DecodeLight || p.f.opts.Decode == DecodeBoth {
		return lightCallOptions
	}
	return []grpc.CallOption{recvOpt}
}

func (p *proxy) nack(err error) *status.Status {
	p.nacks.Add(1)
	p.f.note(fmt.Sprintf("proxy %d: NACK: %v", p.idx, err))
	return &status.Status{Code: 3, Message: err.Error()}
}

type deltaStream = grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]

func (p *proxy) streamDelta(ctx context.Context, cc *grpc.ClientConn, s *session) error {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx, p.callOptions()...)
	if err != nil {
		return err
	}
	first := &discovery.DeltaDiscoveryRequest{Node: p.node, TypeUrl: typeCDS}
	if s.resumed {
		first.InitialResourceVersions = p.held(s, typeCDS)
	}
	if err := st.Send(first); err != nil {
		return err
	}
	for {
		p.wait(ctx)
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		err = p.onDelta(st, s, resp)
		release(resp)
		if err != nil {
			return err
		}
	}
}

// held is what s holds of a type, read under p.mu.
func (p *proxy) held(s *session, typeURL string) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return s.held(typeURL, p.f.names, p.f.versions)
}

func (p *proxy) count(typeURL string, resources int) (int, error) {
	i, ok := typeIndex[typeURL]
	if !ok {
		return 0, fmt.Errorf("response of unexpected type %q", typeURL)
	}
	p.responses[i].Add(1)
	p.resources[i].Add(int64(resources))
	return i, nil
}

func (p *proxy) onDelta(st deltaStream, s *session, resp *discovery.DeltaDiscoveryResponse) error {
	t := resp.GetTypeUrl()
	if _, err := p.count(t, len(resp.GetResources())); err != nil {
		return err
	}
	if !s.answered {
		p.answered()
	}
	s.answered = true
	active := p.f.tracker.list()
	values := make([][]byte, len(resp.GetResources()))
	versions := make([]string, len(resp.GetResources()))
	for j, r := range resp.GetResources() {
		values[j], versions[j] = r.GetResource().GetValue(), r.GetVersion()
	}
	ups, hits, err := p.decodeAll(s, t, values, versions, active)
	if err != nil {
		return st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce(), ErrorDetail: p.nack(err)})
	}
	first := t == typeCDS && !s.gotCDS
	removed := make([]uint32, len(resp.GetRemovedResources()))
	for j, n := range resp.GetRemovedResources() {
		removed[j] = p.f.names.id(n)
	}
	p.mu.Lock()
	s.apply(t, ups, false)
	s.remove(t, removed)
	p.mu.Unlock()
	if err := p.ackDelta(st, s, t, resp.GetNonce(), first); err != nil {
		p.hold(s, t, hits, active)
		return err
	}
	p.settle(s, t, hits, active)
	return nil
}

// ackDelta ACKs a response, then asks for what it newly refers to.
func (p *proxy) ackDelta(st deltaStream, s *session, t, nonce string, first bool) error {
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: nonce}); err != nil {
		return err
	}
	if err := p.subscribeDelta(st, s, typeEDS); err != nil {
		return err
	}
	if first { // Envoy asks for listeners once it has its clusters
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: typeLDS}
		if s.resumed {
			req.InitialResourceVersions = p.held(s, typeLDS)
		}
		if err := st.Send(req); err != nil {
			return err
		}
	}
	return p.subscribeDelta(st, s, typeRDS)
}

// subscribeDelta announces the names of a type the session newly refers
// to or dropped; a resumed stream's first announcement names everything
// it wants, with the versions it holds.
func (p *proxy) subscribeDelta(st deltaStream, s *session, typeURL string) error {
	set, asked := s.eds, &s.edsAsked
	if typeURL == typeRDS {
		set, asked = s.rds, &s.rdsAsked
	}
	if s.resumed && !*asked {
		if (typeURL == typeEDS && !s.gotCDS) || (typeURL == typeRDS && !s.gotLDS) {
			return nil
		}
		*asked = true
		p.mu.Lock()
		set.pending()
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL}
		for id, ns := range set.m {
			if ns.refs > 0 {
				req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, p.f.names.str(id))
			}
		}
		req.InitialResourceVersions = s.held(typeURL, p.f.names, p.f.versions)
		p.mu.Unlock()
		if len(req.ResourceNamesSubscribe) == 0 {
			return nil
		}
		return st.Send(req)
	}
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

func (p *proxy) streamSotw(ctx context.Context, cc *grpc.ClientConn, s *session) error {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx, p.callOptions()...)
	if err != nil {
		return err
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: p.node, TypeUrl: typeCDS}); err != nil {
		return err
	}
	for {
		p.wait(ctx)
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		err = p.onSotw(st, s, resp)
		release(resp)
		if err != nil {
			return err
		}
	}
}

func (p *proxy) onSotw(st sotwStream, s *session, resp *discovery.DiscoveryResponse) error {
	t := resp.GetTypeUrl()
	if _, err := p.count(t, len(resp.GetResources())); err != nil {
		return err
	}
	if !s.answered {
		p.answered()
	}
	s.answered = true
	active := p.f.tracker.list()
	values := make([][]byte, len(resp.GetResources()))
	for j, r := range resp.GetResources() {
		values[j] = r.GetValue()
	}
	ups, hits, err := p.decodeAll(s, t, values, nil, active)
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
	p.mu.Lock()
	s.apply(t, ups, t == typeCDS || t == typeLDS)
	p.mu.Unlock()
	if err := p.ackSotw(st, s, ack, first); err != nil {
		p.hold(s, t, hits, active)
		return err
	}
	p.settle(s, t, hits, active)
	return nil
}

// ackSotw ACKs a response, then asks for what it newly refers to.
func (p *proxy) ackSotw(st sotwStream, s *session, ack *discovery.DiscoveryRequest, first bool) error {
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
	return p.subscribeSotw(st, s, typeRDS, s.rds)
}

func (p *proxy) subscribeSotw(st sotwStream, s *session, typeURL string, set *subSet) error {
	sub, unsub := set.pending()
	if len(sub) == 0 && len(unsub) == 0 {
		return nil
	}
	return st.Send(&discovery.DiscoveryRequest{
		TypeUrl: typeURL, ResourceNames: set.all(p.f.names),
		VersionInfo: s.version[typeURL], ResponseNonce: s.nonce[typeURL],
	})
}

// streamNoACK asks for clusters and listeners and then only reads: it
// never ACKs, NACKs or subscribes, as a wedged or hostile proxy would.
func (p *proxy) streamNoACK(ctx context.Context, cc *grpc.ClientConn) error {
	client := discovery.NewAggregatedDiscoveryServiceClient(cc)
	if p.f.opts.SotW {
		st, err := client.StreamAggregatedResources(ctx, recvOpt)
		if err != nil {
			return err
		}
		for _, t := range []string{typeCDS, typeLDS} {
			if err := st.Send(&discovery.DiscoveryRequest{Node: p.node, TypeUrl: t}); err != nil {
				return err
			}
		}
		for {
			resp, err := st.Recv()
			if err != nil {
				return err
			}
			_, _ = p.count(resp.GetTypeUrl(), len(resp.GetResources()))
		}
	}
	st, err := client.DeltaAggregatedResources(ctx, recvOpt)
	if err != nil {
		return err
	}
	for _, t := range []string{typeCDS, typeLDS} {
		if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: p.node, TypeUrl: t}); err != nil {
			return err
		}
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		_, _ = p.count(resp.GetTypeUrl(), len(resp.GetResources()))
	}
}
