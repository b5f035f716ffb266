package dataplane

import (
	"fmt"
	"sort"
	"strings"
)

// Mode is how a connection reaches the proxy.
type Mode string

// The ways a connection reaches a proxy.
const (
	// Outbound: the pod's application connects to DstIP:DstPort and
	// iptables redirects the connection to the sidecar's port 15001.
	Outbound Mode = "outbound"
	// Inbound: a peer connects to the pod's DstIP:DstPort and iptables
	// redirects the connection to the sidecar's port 15006.
	Inbound Mode = "inbound"
	// Gateway: a client connects to a gateway listener directly.
	Gateway Mode = "gateway"
	// GRPC: a proxyless gRPC client dials xds:///Target.
	GRPC Mode = "grpc"
)

// TLS is what the client does at the transport layer.
type TLS string

// The client's transport.
const (
	Plaintext TLS = "plaintext"
	// SimpleTLS: TLS without a client certificate (an application's own
	// TLS, or a client of a gateway's HTTPS server).
	SimpleTLS TLS = "tls"
	// MutualTLS: TLS with a client certificate. From an Istio peer
	// (Peer set, no ClientCert) it is Istio's mTLS with the workload
	// certificate and an istio ALPN.
	MutualTLS TLS = "mtls"
)

// Protocol is the application protocol spoken on the connection.
type Protocol string

// Application protocols.
const (
	HTTP1 Protocol = "http/1.1"
	HTTP2 Protocol = "h2"
	TCP   Protocol = "tcp"
)

// Request is one connection and, for HTTP, one request on it.
type Request struct {
	Mode Mode
	// Target is what a proxyless gRPC client dials (HOST:PORT).
	Target string

	SrcIP   string
	DstIP   string
	DstPort uint32

	TLS TLS
	// SNI and ALPN the client offers; empty ALPN is filled from the
	// protocol (Istio's ALPN for Istio mTLS).
	SNI  string
	ALPN []string
	// Peer is the client certificate's URI SAN (its SPIFFE identity).
	Peer string

	Protocol Protocol
	// HTTP request; Path includes the query string.
	Method    string
	Authority string
	Path      string
	// Headers are extra request headers, lower-case names.
	Headers map[string]string
}

// withDefaults fills what a real client would send when a field is left
// empty.
func (r Request) withDefaults() Request {
	if r.TLS == "" {
		r.TLS = Plaintext
	}
	if r.Protocol == "" {
		r.Protocol = HTTP1
	}
	if r.SrcIP == "" {
		r.SrcIP = "10.250.0.1"
	}
	if r.IsHTTP() {
		if r.Method == "" {
			r.Method = "GET"
		}
		if r.Path == "" {
			r.Path = "/"
		}
	}
	if len(r.ALPN) == 0 && r.TLS != Plaintext {
		r.ALPN = defaultALPN(r)
	}
	return r
}

func defaultALPN(r Request) []string {
	if r.TLS == MutualTLS && r.Peer != "" {
		// Istio's client sidecar: the istio.alpn filter for HTTP, the
		// cluster's ALPN for TCP.
		switch r.Protocol {
		case HTTP1:
			return []string{"istio-http/1.1"}
		case HTTP2:
			return []string{"istio-h2"}
		default:
			return []string{"istio-peer-exchange", "istio"}
		}
	}
	switch r.Protocol {
	case HTTP1:
		return []string{"http/1.1"}
	case HTTP2:
		return []string{"h2"}
	}
	return nil
}

// IsHTTP reports whether the request is an HTTP request.
func (r Request) IsHTTP() bool { return r.Protocol == HTTP1 || r.Protocol == HTTP2 }

// header returns a request header by lower-case name, pseudo-headers
// included, and whether it is present.
func (r Request) header(name string) (string, bool) {
	switch name {
	case ":path":
		return r.Path, true
	case ":method":
		return r.Method, true
	case ":authority", "host":
		return r.Authority, r.Authority != ""
	case ":scheme":
		if r.TLS != Plaintext && r.Mode == Gateway {
			return "https", true
		}
		return "http", true
	case "content-type":
		if v, ok := r.Headers[name]; ok {
			return v, true
		}
		if r.Mode == GRPC {
			return "application/grpc", true
		}
		return "", false
	}
	v, ok := r.Headers[name]
	return v, ok
}

// pathOnly is the path without its query string.
func (r Request) pathOnly() string {
	p, _, _ := strings.Cut(r.Path, "?")
	return p
}

// query returns the request's query parameters.
func (r Request) query() map[string]string {
	_, q, ok := strings.Cut(r.Path, "?")
	out := map[string]string{}
	if !ok {
		return out
	}
	for _, kv := range strings.Split(q, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if _, seen := out[k]; !seen && k != "" {
			out[k] = v
		}
	}
	return out
}

// String describes the request in one line.
func (r Request) String() string {
	r = r.withDefaults()
	var b strings.Builder
	switch r.Mode {
	case GRPC:
		fmt.Fprintf(&b, "grpc xds:///%s", r.Target)
	default:
		fmt.Fprintf(&b, "%s %s:%d", r.Mode, r.DstIP, r.DstPort)
	}
	if r.TLS != Plaintext {
		b.WriteString(" " + string(r.TLS))
		if r.SNI != "" {
			b.WriteString(" sni=" + r.SNI)
		}
		if r.Peer != "" {
			b.WriteString(" peer=" + r.Peer)
		}
	}
	if !r.IsHTTP() {
		b.WriteString(" tcp")
		if r.Mode == Inbound || r.SrcIP != "10.250.0.1" {
			b.WriteString(" from " + r.SrcIP)
		}
		return b.String()
	}
	if r.Mode == GRPC {
		b.WriteString(" " + r.Path)
	} else {
		if r.Protocol == HTTP2 {
			b.WriteString(" h2")
		}
		fmt.Fprintf(&b, " %s %s%s", r.Method, r.Authority, r.Path)
	}
	keys := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, r.Headers[k])
	}
	if r.Mode == Inbound && r.SrcIP != "10.250.0.1" {
		b.WriteString(" from " + r.SrcIP)
	}
	return b.String()
}
