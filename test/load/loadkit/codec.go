package loadkit

import (
	"fmt"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// lightCodec is the light client mode's gRPC codec. gRPC's proto codec
// copies a response twice: the received frames into one (pooled) buffer,
// then every resource's bytes out of it into its Any. In the light mode
// (where the fleet's own CPU is what is being taken out of a measurement)
// the second copy was a quarter of the fleet's CPU at M1, so this codec
// parses a response's resources itself and points each Any's value into
// the pooled buffer, which it keeps until the proxy is done with the
// response (release). Every other field, and every other message, goes
// through gRPC's proto codec.
type lightCodec struct{ fallback encoding.CodecV2 }

func (lightCodec) Name() string { return grpcproto.Name }

func (c lightCodec) Marshal(v any) (mem.BufferSlice, error) { return c.fallback.Marshal(v) }

// held maps a response to the buffer its resources point into.
var held sync.Map

func (c lightCodec) Unmarshal(data mem.BufferSlice, v any) error {
	var err error
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	b := buf.ReadOnlyData()
	switch m := v.(type) {
	case *discovery.DeltaDiscoveryResponse:
		err = unmarshalLight(b, m, lightWire.deltaResources, func(b []byte) error {
			r, err := lightResource(b)
			if err == nil {
				m.Resources = append(m.Resources, r)
			}
			return err
		})
	case *discovery.DiscoveryResponse:
		err = unmarshalLight(b, m, lightWire.sotwResources, func(b []byte) error {
			a, err := lightAny(b)
			if err == nil {
				m.Resources = append(m.Resources, a)
			}
			return err
		})
	default:
		buf.Free()
		return c.fallback.Unmarshal(data, v)
	}
	if err != nil {
		buf.Free()
		return err
	}
	held.Store(v, buf)
	return nil
}

// release returns the buffer a response read by lightCodec points into;
// the response's resources must not be read after it. A response read by
// another codec has none.
func release(resp any) {
	if buf, ok := held.LoadAndDelete(resp); ok {
		buf.(mem.Buffer).Free()
	}
}

// lightCallOptions are a light fleet's stream options.
var lightCallOptions = []grpc.CallOption{recvOpt, grpc.ForceCodecV2(lightCodec{fallback: encoding.GetCodecV2(grpcproto.Name)})}

var lightWire = struct {
	deltaResources, sotwResources, resourceAny protowire.Number
}{
	deltaResources: field(&discovery.DeltaDiscoveryResponse{}, "resources"),
	sotwResources:  field(&discovery.DiscoveryResponse{}, "resources"),
	resourceAny:    field(&discovery.Resource{}, "resource"),
}

// unmarshalLight hands each occurrence of field resources to add and
// unmarshals the message's other fields into m with proto.Unmarshal.
func unmarshalLight(b []byte, m proto.Message, resources protowire.Number, add func([]byte) error) error {
	rest, err := split(b, resources, add)
	if err != nil {
		return fmt.Errorf("light codec: %T: %w", m, err)
	}
	return proto.UnmarshalOptions{Merge: true}.Unmarshal(rest, m)
}

// split calls take with the bytes of each length-delimited occurrence of
// field n and returns the encoding of every other field.
func split(b []byte, n protowire.Number, take func([]byte) error) ([]byte, error) {
	var rest []byte
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, errWire
		}
		vl := protowire.ConsumeFieldValue(num, typ, b[l:])
		if vl < 0 {
			return nil, errWire
		}
		if num == n && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[l:])
			if err := take(v); err != nil {
				return nil, err
			}
		} else {
			rest = append(rest, b[:l+vl]...)
		}
		b = b[l+vl:]
	}
	return rest, nil
}

// lightResource parses a delta Resource, its Any aliasing b.
func lightResource(b []byte) (*discovery.Resource, error) {
	r := &discovery.Resource{}
	rest, err := split(b, lightWire.resourceAny, func(v []byte) error {
		a, err := lightAny(v)
		r.Resource = a
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(rest, r); err != nil {
		return nil, err
	}
	return r, nil
}

// lightAny parses an Any whose value aliases b.
func lightAny(b []byte) (*anypb.Any, error) {
	a := &anypb.Any{}
	err := fields(b, func(n protowire.Number, v []byte) {
		switch n {
		case wire.anyTypeURL:
			a.TypeUrl = string(v)
		case wire.anyValue:
			a.Value = v
		}
	}, nil)
	return a, err
}
