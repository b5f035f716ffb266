package server

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"google.golang.org/grpc/mem"
)

// A large response's own memory comes from a pool and goes back to it when
// gRPC has written the response.
//
// A variant's listeners written whole (a view) take a header buffer of
// about 1.1 MB at M1 (the small parts of 2,000 listeners with the proxy's
// own lengths, and their headers) and lists of some 10,000 buffers:
// 1.4 of the 2.5 GB the server allocated while M1's 1,000 proxies
// connected (BENCHMARKS.md). Every one was garbage once sent, and the
// collector, which counts what is allocated while it marks as live, grew
// the heap by them.
//
// gRPC frees every buffer of a marshalled message once the transport has
// written it, and once more when the handler's send returns (each holder
// takes a reference with Ref and gives it back with Free). The message
// counts its buffers' references together: when none is held, nobody will
// read its buffers or its buffer list again, and it goes back to the pool.
// A buffer gRPC never frees (an error path that drops the message) only
// keeps the message from the pool; the collector takes it.

// pooledMessage is a marshalled message's own memory.
type pooledMessage struct {
	refs  atomic.Int64
	class int
	// charged is what the message holds of the budget (codec_budget.go)
	// while in use.
	charged *charge
	// buf is the header buffer with its full capacity; parts and out the
	// buffer lists, as long as the largest message that used them.
	buf   []byte
	parts []part
	out   mem.BufferSlice
}

// part is one buffer of a message: its own header bytes or a resource's
// shared bytes. A pooled message's parts count its references (m); an
// unpooled one's (m nil) are plain slices.
type part struct {
	mem.SliceBuffer
	m *pooledMessage
}

func (p *part) Ref() {
	if p.m != nil {
		p.m.refs.Add(1)
	}
}

func (p *part) Free() {
	if p.m == nil {
		return
	}
	switch r := p.m.refs.Add(-1); {
	case r == 0:
		p.m.release()
	case r < 0:
		// Freed more often than referenced: the message may already
		// have gone back to the pool and be written over while sent.
		panic("xds codec: a response buffer was freed more often than referenced")
	}
}

// Slice is a further reference to part of p's bytes.
func (p *part) Slice(start, end int) mem.Buffer {
	p.Ref()
	return &part{SliceBuffer: p.SliceBuffer[start:end], m: p.m}
}

// Messages of at least minPooled header bytes are pooled, in classes of
// four sizes per power of two (a message uses at least four fifths of its
// buffer), up to maxPooledBits.
const (
	minPooledBits = 15 // 32 KiB
	maxPooledBits = 23 // 8 MiB
	minPooled     = 1 << minPooledBits
	classesPerBit = 4
)

// idleBytes bounds the memory a class keeps between messages. Idle
// messages are held weakly, and so are gone at the next garbage
// collection: a pool the collector finds holding them makes them live,
// and the heap grows to twice what it finds live. A sync.Pool kept all 64
// that M1's streams had in flight when its proxies were configured, 55
// MB; held strongly until the collection's end, M1's idle messages were
// 33 of the 134 MB a collection found live after connecting
// (BENCHMARKS.md).
const idleBytes = 32 << 20

// messagePool is a class's idle messages.
type messagePool struct {
	mu    sync.Mutex
	idle  []idleMessage
	bytes int
}

// idleMessage is an idle message, held weakly, and the memory it holds.
type idleMessage struct {
	m    weak.Pointer[pooledMessage]
	size int
}

var messagePools [(maxPooledBits - minPooledBits + 1) * classesPerBit]messagePool

func init() { dropIdleAtEachGC() }

// gcSentinel is an object made only to be collected: its cleanup marks a
// garbage collection. It holds a pointer so that it is not one of the
// tiny objects the allocator packs together.
type gcSentinel struct {
	_ *byte
	_ [16]byte
}

func dropIdleAtEachGC() {
	runtime.AddCleanup(&gcSentinel{}, func(struct{}) {
		for i := range messagePools {
			p := &messagePools[i]
			p.mu.Lock()
			clear(p.idle)
			p.idle, p.bytes = p.idle[:0], 0
			p.mu.Unlock()
		}
		dropIdleAtEachGC()
	}, struct{}{})
}

// messageClass is the pool class of a header buffer of n bytes and the
// capacity of that class's buffers; ok is false for a size not pooled.
func messageClass(n int) (class, size int, ok bool) {
	if n < minPooled || n > 1<<maxPooledBits {
		return 0, 0, false
	}
	b := bits.Len(uint(n - 1)) // 1<<(b-1) < n <= 1<<b
	base, step := 1<<(b-1), 1<<(b-1)/classesPerBit
	k := (n - base + step - 1) / step // 1..classesPerBit
	return (b-minPooledBits)*classesPerBit + k - 1, base + k*step, true
}

// getMessage returns a pooled message whose header buffer holds n bytes
// and whose lists hold buffers, or nil for a message too small or too
// large to pool; with b, it takes its memory from b first.
func getMessage(n, buffers int, b *sendBudget) *pooledMessage {
	class, size, ok := messageClass(n)
	if !ok {
		return nil
	}
	var charged int64
	if b != nil {
		charged = b.take(messageCost(size, buffers))
	}
	var m *pooledMessage
	p := &messagePools[class]
	p.mu.Lock()
	for k := len(p.idle); m == nil && k > 0; k-- {
		in := p.idle[k-1]
		p.idle[k-1] = idleMessage{}
		p.idle = p.idle[:k-1]
		p.bytes -= in.size
		m = in.m.Value() // nil when collected
	}
	p.mu.Unlock()
	if m == nil {
		m = &pooledMessage{class: class, buf: make([]byte, size), charged: new(charge)}
		// A message gRPC never frees (an error path that drops it)
		// gives its share back when collected.
		runtime.AddCleanup(m, (*charge).give, m.charged)
	}
	if cap(m.parts) < buffers {
		m.parts = make([]part, 0, buffers)
		m.out = make(mem.BufferSlice, 0, buffers)
	}
	m.charged.hold(b, charged)
	return m
}

// size is the memory m holds.
func (m *pooledMessage) size() int {
	return cap(m.buf) + cap(m.parts)*int(unsafe.Sizeof(part{})) + cap(m.out)*int(unsafe.Sizeof(mem.Buffer(nil)))
}

// release clears m's lists, so that the pool holds no resource's bytes,
// and gives m back to its pool if the pool has room.
func (m *pooledMessage) release() {
	m.charged.give()
	clear(m.parts[:cap(m.parts)])
	clear(m.out[:cap(m.out)])
	size := m.size()
	p := &messagePools[m.class]
	p.mu.Lock()
	if p.bytes+size <= idleBytes {
		p.idle = append(p.idle, idleMessage{weak.Make(m), size})
		p.bytes += size
	}
	p.mu.Unlock()
}
