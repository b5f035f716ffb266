package gen

import (
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// serverKind is how a Gateway server is served, decided by its port's
// protocol and its TLS mode as in Istio:
//
//	HTTP, HTTP2, GRPC, GRPC-WEB                  serverHTTP
//	HTTPS + SIMPLE, MUTUAL or ISTIO_MUTUAL       serverHTTPS (TLS terminated, http routes)
//	HTTPS or TLS + PASSTHROUGH                   serverPassthrough (SNI, tls routes)
//	HTTPS or TLS + AUTO_PASSTHROUGH              serverAutoPassthrough (SNI = Istio's cluster name)
//	TCP, MONGO, REDIS, MYSQL without tls         serverTCP (tcp routes)
//	TLS, TCP... + SIMPLE, MUTUAL, ISTIO_MUTUAL   serverTLSTCP (TLS terminated, tcp routes)
//
// Anything else is serverUnsupported and left out: OPTIONAL_MUTUAL and
// other protocols are reported as unsupported values, HTTPS or TLS
// without tls settings (invalid, refused by validation) are logged.
type serverKind int

const (
	serverUnsupported serverKind = iota
	serverHTTP
	serverHTTPS
	serverPassthrough
	serverAutoPassthrough
	serverTCP
	serverTLSTCP
)

// portClass is what a Gateway port carries. Istio lets one port carry plain
// HTTP servers (merged), or one opaque TCP server, or TLS servers told
// apart by SNI; a server of another class on a port is refused, the first
// server of a port deciding.
func (k serverKind) portClass() string {
	switch k {
	case serverHTTP:
		return "http"
	case serverTCP:
		return "tcp"
	case serverUnsupported:
		return ""
	}
	return "tls"
}

// classifyServer tells how s is served; for serverUnsupported it also
// names the field and value that make it so ("tls.mode=OPTIONAL_MUTUAL"),
// or nothing when s is invalid (HTTPS or TLS without tls settings).
func classifyServer(s *networking.Server) (serverKind, string) {
	proto := strings.ToUpper(s.GetPort().GetProtocol())
	tls := s.GetTls()
	switch proto {
	case "HTTP", "HTTP2", "GRPC", "GRPC-WEB":
		return serverHTTP, ""
	case "HTTPS", "TLS", "TCP", "MONGO", "REDIS", "MYSQL":
	default:
		return serverUnsupported, "port.protocol=" + s.GetPort().GetProtocol()
	}
	if tls == nil {
		if proto == "HTTPS" || proto == "TLS" {
			// Invalid, refused by validation: not an unsupported value.
			return serverUnsupported, ""
		}
		return serverTCP, ""
	}
	switch tls.GetMode() {
	case networking.ServerTLSSettings_PASSTHROUGH:
		return serverPassthrough, ""
	case networking.ServerTLSSettings_AUTO_PASSTHROUGH:
		return serverAutoPassthrough, ""
	case networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL, networking.ServerTLSSettings_ISTIO_MUTUAL:
		if proto == "HTTPS" {
			return serverHTTPS, ""
		}
		return serverTLSTCP, ""
	}
	return serverUnsupported, "tls.mode=" + tls.GetMode().String()
}

// gatewayUnsupportedValues lists the servers of a Gateway spec that are
// written with supported fields but take values generation does not
// serve, indexed as unsupportedFields writes fields
// ("servers[2].tls.mode=OPTIONAL_MUTUAL").
func gatewayUnsupportedValues(spec proto.Message) []string {
	gw, ok := spec.(*networking.Gateway)
	if !ok {
		return nil
	}
	var out []string
	for i, s := range gw.GetServers() {
		if k, why := classifyServer(s); k == serverUnsupported && why != "" {
			out = append(out, "servers["+itoa(int32(i))+"]."+why)
		}
	}
	return out
}
