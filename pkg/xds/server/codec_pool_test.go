package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
	"weak"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// perAddressView is the listeners of a variant with a listener per
// service address: a view whose message is large enough to be pooled.
func perAddressView(t *testing.T) *gen.Set {
	t.Helper()
	set := ratingsVariant(t, 300, func(o *gen.Options) { o.ListenersPerAddress = true }).Sets[gen.ListenerType]
	if !set.IsView() {
		t.Fatal("the variant's listeners are not a view")
	}
	return set
}

func TestMessageClasses(t *testing.T) {
	last := -1
	for n := minPooled - 1; n <= 1<<maxPooledBits+1; n += 1 + n/97 {
		class, size, ok := messageClass(n)
		if n < minPooled || n > 1<<maxPooledBits {
			if ok {
				t.Fatalf("%d bytes pooled in class %d", n, class)
			}
			continue
		}
		if !ok || class < 0 || class >= len(messagePools) {
			t.Fatalf("%d bytes: class %d (%v) of %d", n, class, ok, len(messagePools))
		}
		if size < n || size > n+n/4 {
			t.Fatalf("%d bytes in a class of %d", n, size)
		}
		if class < last {
			t.Fatalf("%d bytes: class %d after %d", n, class, last)
		}
		last = class
		// Every size of a class has the class's buffer size.
		if c, s, _ := messageClass(size); c != class || s != size {
			t.Fatalf("%d bytes: class %d of %d, its size %d: class %d of %d", n, class, size, size, c, s)
		}
	}
	if last != len(messagePools)-1 {
		t.Errorf("the largest pooled size is class %d of %d", last, len(messagePools))
	}
}

// sendAsGRPC frees bs as gRPC's server does a message it sends: the
// transport takes a reference (Write), the handler gives its own back
// when Write returns, and the transport's reader frees each buffer once
// it has written it. It returns the bytes read.
func sendAsGRPC(bs mem.BufferSlice) []byte {
	bs.Ref()
	bs.Free()
	var r mem.Reader
	r.Reset(bs)
	bs.Free()
	var out bytes.Buffer
	buf := make([]byte, 16<<10)
	for r.Remaining() > 0 {
		n, _ := r.Read(buf)
		out.Write(buf[:n])
	}
	r.Close()
	return out.Bytes()
}

// A view's message is pooled; once gRPC has freed all of its buffers its
// memory goes back to the pool, holding no resource's bytes, and the next
// message written in it is as written afresh.
func TestPooledMessageIsReleasedWhenSent(t *testing.T) {
	set := perAddressView(t)
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: gen.ListenerType, SystemVersionInfo: "v1", Nonce: "2"}
	var send []*gen.Resource
	for _, n := range set.Names {
		send = append(send, set.Get(n))
	}
	// The same listeners written one by one: a message of its own memory
	// (most of its bytes are shared, its header buffer small).
	want, err := Codec().Marshal(&deltaWire{resp: resp, send: send})
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := want.Materialize()

	var w sliceWriter
	if err := w.delta(resp, nil, set, nil); err != nil {
		t.Fatal(err)
	}
	bs := w.done()
	m := w.m
	if m == nil {
		t.Fatalf("a view's message of %d header bytes is not pooled", cap(w.buf))
	}
	if got := m.refs.Load(); got != int64(len(bs)) {
		t.Fatalf("%d buffers hold %d references", len(bs), got)
	}
	for _, b := range bs {
		if p, ok := b.(*part); !ok || p.m != m {
			t.Fatalf("a buffer of the message is a %T not counted by it", b)
		}
	}
	if got := sendAsGRPC(bs); !bytes.Equal(got, wantBytes) {
		t.Fatal("the pooled view's bytes differ from its listeners written one by one")
	}
	if got := m.refs.Load(); got != 0 {
		t.Fatalf("%d references held once sent", got)
	}
	for i, p := range m.parts[:cap(m.parts)] {
		if p.SliceBuffer != nil || p.m != nil {
			t.Fatalf("the released message's part %d still holds %d bytes", i, len(p.SliceBuffer))
		}
	}
	for i, b := range m.out[:cap(m.out)] {
		if b != nil {
			t.Fatalf("the released message's buffer %d is still listed", i)
		}
	}

	// Written again in (most likely) the same memory, and again with that
	// message's buffers freed in another order: always the same bytes.
	for round := 0; round < 3; round++ {
		got, err := Codec().Marshal(&deltaWire{resp: resp, view: set})
		if err != nil {
			t.Fatal(err)
		}
		var b []byte
		if round == 1 {
			b = got.Materialize()
			got.Ref()
			for i := len(got) - 1; i >= 0; i-- {
				got[i].Free()
			}
			got.Free()
		} else {
			b = sendAsGRPC(got)
		}
		if !bytes.Equal(b, wantBytes) {
			t.Fatalf("round %d: the view written in pooled memory differs", round)
		}
	}
}

// A buffer freed once too often means the message may be written over
// while it is sent: the codec stops rather than send it.
func TestPooledMessageFreedTooOftenPanics(t *testing.T) {
	set := perAddressView(t)
	bs, err := Codec().Marshal(&deltaWire{resp: &discovery.DeltaDiscoveryResponse{TypeUrl: gen.ListenerType}, view: set})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := bs[0].(*part); !ok || bs[0].(*part).m == nil {
		t.Fatal("the view's message is not pooled")
	}
	bs.Free()
	defer func() {
		if recover() == nil {
			t.Error("a buffer freed twice did not panic")
		}
	}()
	bs[0].Free()
}

// Small messages are not pooled: their buffers are plain slices.
func TestSmallMessageIsNotPooled(t *testing.T) {
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: gen.ClusterType, Nonce: "1"}
	bs, err := Codec().Marshal(&deltaWire{resp: resp, send: classResources(t, 2, gen.ClusterType)})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if p, ok := b.(*part); !ok || p.m != nil {
			t.Fatalf("a small message's buffer is %T, pooled %v", b, ok && p.m != nil)
		}
	}
	bs.Free()
	bs.Free() // no counts: freeing again is harmless
}

// A class keeps at most idleBytes of idle messages.
func TestIdleMessagesAreBounded(t *testing.T) {
	// No collection (which drops idle messages) while it counts.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	n := 1 << 20
	class, _, _ := messageClass(n)
	p := &messagePools[class]
	settleIdleDrops(t, p, n)
	var ms []*pooledMessage
	for i := 0; i < 3*idleBytes/n; i++ {
		ms = append(ms, getMessage(n, 1000, nil))
	}
	for _, m := range ms {
		m.release()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if want := idleBytes / ms[0].size(); len(p.idle) != want || p.bytes > idleBytes {
		t.Errorf("%d idle messages of %d bytes kept, want %d, at most %d bytes", len(p.idle), p.bytes, want, idleBytes)
	}
	sum := 0
	for _, in := range p.idle {
		if m := in.m.Value(); m == nil || m.size() != in.size {
			t.Fatalf("an idle message was collected with collection off, or its size changed")
		}
		sum += in.size
	}
	if sum != p.bytes {
		t.Errorf("the pool counts %d bytes, its messages hold %d", p.bytes, sum)
	}
}

// Idle messages do not outlive a garbage collection.
func TestIdleMessagesAreDroppedAtGC(t *testing.T) {
	class, _, _ := messageClass(minPooled)
	p := &messagePools[class]
	getMessage(minPooled, 10, nil).release()
	idle := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.idle)
	}
	if idle() == 0 {
		t.Fatal("a released message was not kept")
	}
	// The cleanup that drops them runs after the collection, on its own
	// goroutine.
	deadline := time.Now().Add(30 * time.Second)
	for idle() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("idle messages kept through garbage collections")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// An idle message is not live to the collector: the first collection
// after its release frees it, not the one after.
func TestIdleMessagesAreNotLive(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // only this test's collection
	m := getMessage(minPooled, 10, nil)
	w := weak.Make(m)
	m.release()
	m = nil
	runtime.GC()
	if w.Value() != nil {
		t.Error("an idle message survived a collection: the pool holds it strongly")
	}
}

// Pooled responses sent over a real gRPC connection, eight streams at
// once, each message taking the memory the one before gave back: every
// message arrives as written. Under the race detector this also checks
// that no message goes back to the pool while gRPC's writer still reads
// it.
func TestPooledResponsesOverGRPC(t *testing.T) {
	set := perAddressView(t)
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: gen.ListenerType, SystemVersionInfo: "v1", Nonce: "1"}
	ref, err := Codec().Marshal(&deltaWire{resp: resp, view: set})
	if err != nil {
		t.Fatal(err)
	}
	var want discovery.DeltaDiscoveryResponse
	if err := proto.Unmarshal(ref.Materialize(), &want); err != nil {
		t.Fatal(err)
	}
	const streams, messages = 8, 20
	desc := grpc.ServiceDesc{
		ServiceName: "test.Pooled",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Send",
			ServerStreams: true,
			Handler: func(_ any, s grpc.ServerStream) error {
				for range messages {
					if err := s.SendMsg(&deltaWire{resp: resp, view: set}); err != nil {
						return err
					}
				}
				return nil
			},
		}},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(Codec()))
	srv.RegisterService(&desc, nil)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, streams)
	for range streams {
		go func() {
			errs <- func() error {
				st, err := cc.NewStream(ctx, &desc.Streams[0], "/test.Pooled/Send")
				if err != nil {
					return err
				}
				if err := st.CloseSend(); err != nil {
					return err
				}
				for i := 0; ; i++ {
					var got discovery.DeltaDiscoveryResponse
					switch err := st.RecvMsg(&got); {
					case errors.Is(err, io.EOF):
						if i != messages {
							return fmt.Errorf("%d messages received, want %d", i, messages)
						}
						return nil
					case err != nil:
						return err
					}
					if !proto.Equal(&got, &want) {
						return fmt.Errorf("message %d differs from the view as written", i)
					}
				}
			}()
		}()
	}
	for range streams {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// settleIdleDrops runs a collection and waits for the drop it causes
// (dropIdleAtEachGC's cleanup, which runs after the collection, on its
// own goroutine): a drop still due from an earlier test's collection
// would otherwise empty p while a test counts it.
func settleIdleDrops(t *testing.T, p *messagePool, n int) {
	t.Helper()
	m := getMessage(n, 1000, nil)
	m.release()
	runtime.GC()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		empty := len(p.idle) == 0
		p.mu.Unlock()
		if empty {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the collection's drop of idle messages never ran")
		}
		time.Sleep(time.Millisecond)
	}
}
