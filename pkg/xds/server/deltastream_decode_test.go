package server

import (
	"context"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// rawCodec sends and receives messages as the bytes they are.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// The stream's loop decodes what its reader received: a request that
// decodes is served, bytes that are not a DeltaDiscoveryRequest end the
// stream as gRPC's codec would have (and istiod's streams do): Internal,
// "failed to unmarshal", the decoder's message.
func TestDeltaStreamDecodesRequestsInItsLoop(t *testing.T) {
	ts := startServer(t, meshStore(t, 1))
	cc := dial(t, ts.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
		"/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	req, err := proto.Marshal(&discovery.DeltaDiscoveryRequest{Node: node(sidecarID, nil), TypeUrl: gen.ClusterType})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&req); err != nil {
		t.Fatal(err)
	}
	var b []byte
	if err := st.RecvMsg(&b); err != nil {
		t.Fatal(err)
	}
	var resp discovery.DeltaDiscoveryResponse
	if err := proto.Unmarshal(b, &resp); err != nil || resp.GetTypeUrl() != gen.ClusterType || len(resp.GetResources()) == 0 {
		t.Fatalf("first response %v (%v), want clusters", &resp, err)
	}
	// Field 1 (the node), five bytes long, and one byte of it.
	garbage := []byte{1<<3 | 2, 5, 'a'}
	if err := st.SendMsg(&garbage); err != nil {
		t.Fatal(err)
	}
	for {
		err := st.RecvMsg(&b)
		if err == nil {
			continue // a response already on its way
		}
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "failed to unmarshal the received message: proto:") {
			t.Fatalf("stream ended with %v, want gRPC's Internal unmarshal error", err)
		}
		return
	}
}
