package server

import (
	"hash/maphash"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A proxy's subscriptions to its routes and its endpoints are thousands
// of names, the same as its class's other proxies', and gRPC receives
// each in several buffers (one per HTTP/2 frame). Copying such a request
// into one buffer, then listing its names, was 140 of the 387 MB the
// server allocated while M1's 1,000 proxies connected, only for the
// stream to adopt a set of names the pool already held (nameSet.adopt).
// matchShared reads the names where gRPC put them and checks them
// against that set instead: when they are exactly its names, the request
// is given the set's own list, and nothing of it is copied but its other
// fields. Any other request is decoded from a copy (oneBuffer,
// unmarshalDeltaRequest), so that what a request means never depends on
// the pool.

// matchShared decodes the request in data into req when it subscribes to
// exactly the names of a set p holds, more than foldAbove of them, and
// unsubscribes from nothing; req's subscribed names are then the set's
// list (sharedNames.names, never written). ok is false, and req untouched,
// for any other request, including one that is not a well-formed
// encoding: the caller decodes it as usual.
func matchShared(data mem.BufferSlice, p *namePool, req *discovery.DeltaDiscoveryRequest) (ok bool) {
	var scratch []byte
	var others []byte
	var h uint64
	count := 0
	r := fieldReader{data: data}
	for !r.done() {
		num, typ, v, x, ok := r.next(&scratch)
		switch {
		case !ok:
			return false
		case isName(num, typ) && num == deltaSubscribe:
			h += maphash.Bytes(p.seed, v)
			count++
		case num == deltaSubscribe || num == deltaUnsubscribe:
			return false // an unsubscription, or a name field of the wrong type
		default:
			others = appendField(others, num, typ, v, x)
		}
	}
	if count <= foldAbove {
		return false
	}
	p.mu.Lock()
	cand := p.sets[h].Value()
	p.mu.Unlock()
	if cand == nil || len(cand.names) != count || !namesOf(data, cand, &scratch) {
		return false
	}
	if proto.Unmarshal(others, req) != nil {
		proto.Reset(req)
		return false
	}
	req.ResourceNamesSubscribe = cand.names[:count:count]
	return true
}

// namesOf reports whether the names data subscribes to are each a name
// of cand, none twice. With as many names as cand, they are cand's.
func namesOf(data mem.BufferSlice, cand *sharedNames, scratch *[]byte) bool {
	seen := make([]uint64, (len(cand.names)+63)/64)
	r := fieldReader{data: data}
	for !r.done() {
		num, typ, v, _, _ := r.next(scratch)
		if num != deltaSubscribe || !isName(num, typ) {
			continue
		}
		i, ok := cand.m[string(v)]
		if !ok || seen[i/64]&(1<<(i%64)) != 0 {
			return false
		}
		seen[i/64] |= 1 << (i % 64)
	}
	return true
}

// appendField appends a field read by fieldReader.next to b, encoded
// again: the same field, though a varint may come out shorter.
func appendField(b []byte, num protowire.Number, typ protowire.Type, v []byte, x uint64) []byte {
	b = protowire.AppendTag(b, num, typ)
	switch typ {
	case protowire.VarintType:
		return protowire.AppendVarint(b, x)
	case protowire.BytesType:
		return protowire.AppendBytes(b, v)
	}
	return append(b, v...)
}

// fieldReader reads a message's fields from the buffers it arrived in,
// whose boundaries fall anywhere, even within a tag.
type fieldReader struct {
	data mem.BufferSlice
	i    int // the buffer read from
	off  int // how far into it
}

func (r *fieldReader) done() bool {
	for r.i < len(r.data) && r.off == r.data[r.i].Len() {
		r.i, r.off = r.i+1, 0
	}
	return r.i == len(r.data)
}

// next reads a field: its number, its type and its value. A varint's
// value is x; any other's is v, a bytes field's contents or the four or
// eight bytes of a fixed one, a view of the buffer it lies in or, when
// it spans buffers, a copy in *scratch (which the next call may reuse).
// Groups, and input cut short or malformed, give ok false.
func (r *fieldReader) next(scratch *[]byte) (num protowire.Number, typ protowire.Type, v []byte, x uint64, ok bool) {
	tag, ok := r.varint()
	if !ok || tag>>3 == 0 || tag>>3 > uint64(protowire.MaxValidNumber) {
		return 0, 0, nil, 0, false
	}
	num, typ = protowire.Number(tag>>3), protowire.Type(tag&7)
	switch typ {
	case protowire.VarintType:
		x, ok = r.varint()
	case protowire.BytesType:
		var n uint64
		if n, ok = r.varint(); ok && n <= maxRequestField {
			v, ok = r.take(int(n), scratch)
		} else {
			ok = false
		}
	case protowire.Fixed32Type:
		v, ok = r.take(4, scratch)
	case protowire.Fixed64Type:
		v, ok = r.take(8, scratch)
	default:
		ok = false
	}
	return num, typ, v, x, ok
}

// maxRequestField bounds a bytes field's length as read, above what gRPC
// lets a request be (MaxRecvMsgSize, 4 MiB).
const maxRequestField = 1 << 30

func (r *fieldReader) byte() (byte, bool) {
	if r.done() {
		return 0, false
	}
	c := r.data[r.i].ReadOnlyData()[r.off]
	r.off++
	return c, true
}

func (r *fieldReader) varint() (uint64, bool) {
	var x uint64
	for shift := 0; shift < 64; shift += 7 {
		c, ok := r.byte()
		if !ok {
			return 0, false
		}
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return x, true
		}
	}
	return 0, false
}

// take reads n bytes: a view of the buffer they lie in, or a copy in
// *scratch when they span buffers.
func (r *fieldReader) take(n int, scratch *[]byte) ([]byte, bool) {
	if r.done() {
		return nil, n == 0
	}
	if b := r.data[r.i].ReadOnlyData()[r.off:]; len(b) >= n {
		r.off += n
		return b[:n:n], true
	}
	out := (*scratch)[:0]
	for len(out) < n {
		if r.done() {
			return nil, false
		}
		b := r.data[r.i].ReadOnlyData()[r.off:]
		k := min(len(b), n-len(out))
		out = append(out, b[:k]...)
		r.off += k
	}
	*scratch = out
	return out, true
}
