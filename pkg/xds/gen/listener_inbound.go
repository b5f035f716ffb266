package gen

import (
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	apinetworking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Sidecar ingress listeners, with Istio's defaults (its inbound listener
// and cluster builders):
//
//   - When the Sidecar that applies to the proxy has ingress listeners, the
//     proxy's inbound ports are those listeners' ports instead of the ports
//     of the services selecting the pod (Istio merges the two only with
//     PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE, off by default).
//     Each gets the cluster inbound|PORT|| and a virtualInbound chain
//     matched by the destination port, with the proxy's PeerAuthentication
//     mode and AuthorizationPolicy RBAC filters like any inbound port.
//   - defaultEndpoint 127.0.0.1:P or [::1]:P sends to the loopback port P;
//     0.0.0.0:P or [::]:P to the proxy's own IPv4 (IPv6) address, port P
//     (the loopback without one); none sends to the original destination
//     (an ORIGINAL_DST cluster bound to 127.0.0.6, as the inbound
//     passthrough). Other IPs, which Istio's validation refuses, also go
//     to the original destination, as in Istio.
//   - tls SIMPLE or MUTUAL with serverCertificate/privateKey (and
//     caCertificates) files terminates TLS on the port, but only where its
//     PeerAuthentication mode is DISABLE: otherwise mesh mTLS wins, as in
//     Istio (which applies Sidecar ingress TLS only with its experimental
//     ENABLE_TLS_ON_SIDECAR_INGRESS; here it is always on). HTTPS and TLS
//     ports are then served as HTTP and TCP.
//   - bind changes nothing for captured traffic (Istio only names the
//     chain after it).
//   - a port's protocol is its protocol field as Istio's protocol.Parse
//     reads it, never its name; without one (or with one Istio does not
//     know) the port's traffic is sniffed, as Istio does (listener_sniff.go),
//     except behind TLS the port terminates: served as TCP, reported.
//
// Not supported, reported as unsupported values (sidecarUnsupportedValues)
// or logged per proxy: unix domain socket endpoints (the port is left
// out), captureMode NONE (handled as DEFAULT: no listener bound to the
// port), other TLS modes and settings (the port stays plaintext), and a
// proxyless gRPC workload's ingress (its server listeners follow its
// services).

// ingressPort is one inbound port of a sidecar and its cluster; tls is set
// when the port terminates the Sidecar's TLS instead of mesh mTLS.
type ingressPort struct {
	InboundPort
	cluster *clusterv3.Cluster
	tls     *corev3.TransportSocket
}

// inbound resolves p's inbound ports: its Sidecar's ingress listeners if
// it has any, else the target ports of the services selecting it.
func (g *Generator) inbound(w *view, p *model.Proxy, mtls inboundMTLS) []ingressPort {
	if c, _ := w.sidecarFor(p); c != nil {
		if sc := c.Object.(*networkingv1.Sidecar); len(sc.Spec.GetIngress()) > 0 {
			return g.sidecarIngress(c, sc, p, mtls)
		}
	}
	var out []ingressPort
	localhost := w.Mesh().InboundLocalhost()
	for _, ip := range inboundPorts(w, p) {
		out = append(out, ingressPort{InboundPort: ip, cluster: inboundServiceCluster(ip.Port, localhost)})
	}
	return out
}

// inboundServiceCluster is the cluster of a pod port that a service
// selecting the pod exposes, as Istio builds it for the MeshConfig's
// inboundTrafficPolicy: PASSTHROUGH (the default) sends to the address the
// connection was for, the pod's own, from 127.0.0.6 (an ORIGINAL_DST
// cluster, never cleaned up); LOCALHOST sends to 127.0.0.1.
func inboundServiceCluster(port int32, localhost bool) *clusterv3.Cluster {
	if localhost {
		return inboundCluster(port)
	}
	return inboundOrigDst(port)
}

// sidecarIngress turns the Sidecar's ingress listeners into inbound
// ports, sorted by port; a listener that cannot be served is logged and
// left out, and of two on one port the first wins.
func (g *Generator) sidecarIngress(c *model.Config, sc *networkingv1.Sidecar, p *model.Proxy, mtls inboundMTLS) []ingressPort {
	var out []ingressPort
	seen := map[int32]bool{}
	for i, l := range sc.Spec.GetIngress() {
		at := "ingress[" + strconv.Itoa(i) + "]"
		n := l.GetPort().GetNumber()
		if n == 0 || n > 65535 || seen[int32(n)] {
			g.warnOnce(c, sc.ResourceVersion, at+".port", "Sidecar ingress listener without a usable port (none, out of range or repeated) is left out",
				"listener", at, "port", n)
			continue
		}
		port := int32(n)
		// Istio: protocol.Parse of the port's protocol, not its name; an
		// empty or unknown one is sniffed (listener_sniff.go).
		ip := ingressPort{InboundPort: InboundPort{Port: port, Protocol: model.ParseProtocol(l.GetPort().GetProtocol())}}
		cluster, problem := ingressCluster(port, l.GetDefaultEndpoint(), p.IPs)
		if problem != "" {
			g.warnOnce(c, sc.ResourceVersion, at+".defaultEndpoint", "Sidecar ingress defaultEndpoint: "+problem,
				"listener", at, "defaultEndpoint", l.GetDefaultEndpoint())
		}
		if cluster == nil {
			continue
		}
		ip.cluster = cluster
		if l.GetTls() != nil {
			ip = g.ingressTLS(c, sc, at, l.GetTls(), ip, mtls.forPort(port))
		}
		if ip.tls != nil && ip.Protocol.IsSniffed() {
			g.warnOnce(c, sc.ResourceVersion, at+".port.protocol",
				"Sidecar ingress port without protocol that terminates TLS: sniffing after TLS termination is not supported, the port is served as TCP",
				"listener", at, "protocol", l.GetPort().GetProtocol())
		}
		seen[port] = true
		out = append(out, ip)
	}
	sortIngress(out)
	return out
}

func sortIngress(ps []ingressPort) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].Port < ps[j].Port })
}

// ingressCluster is inbound|PORT|| to where defaultEndpoint points (see
// the rules above). problem says what of the endpoint is not honoured;
// the cluster is nil when the port cannot be served at all.
func ingressCluster(port int32, endpoint string, ips []string) (c *clusterv3.Cluster, problem string) {
	if endpoint == "" {
		return inboundOrigDst(port), ""
	}
	if strings.HasPrefix(endpoint, "unix://") {
		return nil, "unix domain sockets are not supported; the listener is left out"
	}
	host, ps, err := net.SplitHostPort(endpoint)
	target, perr := strconv.Atoi(ps)
	if err != nil || perr != nil || target <= 0 || target > 65535 {
		return nil, "not IP:PORT; the listener is left out"
	}
	var addr string
	switch host {
	case "127.0.0.1", "::1":
		addr = host
	case "0.0.0.0":
		addr = firstIP(ips, true, "127.0.0.1")
	case "::":
		addr = firstIP(ips, false, "::1")
	default:
		return inboundOrigDst(port), "only 127.0.0.1, [::1], 0.0.0.0 and [::] are allowed; traffic goes to the original destination"
	}
	c = inboundCluster(port)
	c.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address = socketAddress(addr, int32(target))
	return c, ""
}

// firstIP is the first IPv4 (or IPv6) address of ips, else fallback.
func firstIP(ips []string, v4 bool, fallback string) string {
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() == v4 {
			return a.String()
		}
	}
	return fallback
}

// inboundOrigDst sends a port's traffic on to its original destination,
// from 127.0.0.6 so that the application sees it as from outside the pod.
// As in Istio, the cluster's hosts are never cleaned up in practice:
// there is only the pod's own address.
func inboundOrigDst(port int32) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 InboundClusterName(port),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
		ConnectTimeout:       durationpb.New(10 * time.Second),
		CleanupInterval:      durationpb.New(9223372035 * time.Second), // Istio's maxSecondsValue, about 292 years
		UpstreamBindConfig:   &corev3.BindConfig{SourceAddress: socketAddress("127.0.0.6", 0).GetSocketAddress()},
	}
}

// ingressTLS makes ip terminate the listener's TLS when mesh mTLS is off
// on the port and the settings can be served; otherwise ip is returned
// unchanged and the reason logged.
func (g *Generator) ingressTLS(c *model.Config, sc *networkingv1.Sidecar, at string, tls *apinetworking.ServerTLSSettings, ip ingressPort, mode MTLSMode) ingressPort {
	ctx := fileTLSContext(tls)
	if ctx == nil {
		g.warnOnce(c, sc.ResourceVersion, at+".tls", "Sidecar ingress tls needs mode SIMPLE or MUTUAL with serverCertificate and privateKey files (MUTUAL: caCertificates); the port stays plaintext",
			"listener", at, "mode", tls.GetMode().String())
		return ip
	}
	if mode != MTLSDisable {
		g.warnOnce(c, sc.ResourceVersion, at+".tls#"+mode.String(), "Sidecar ingress tls applies only where PeerAuthentication mode is DISABLE; mesh mTLS is used on the port",
			"listener", at, "port", ip.Port, "mtls", mode.String())
		return ip
	}
	switch ip.Protocol {
	case model.ProtocolHTTPS:
		ip.Protocol = model.ProtocolHTTP
	case model.ProtocolTLS:
		ip.Protocol = model.ProtocolTCP
	}
	ip.tls = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
	return ip
}

// fileTLSContext is the server TLS of SIMPLE or MUTUAL settings with
// certificate files in the proxy's container; nil for anything else.
func fileTLSContext(tls *apinetworking.ServerTLSSettings) *tlsv3.DownstreamTlsContext {
	mode := tls.GetMode()
	if (mode != apinetworking.ServerTLSSettings_SIMPLE && mode != apinetworking.ServerTLSSettings_MUTUAL) ||
		tls.GetServerCertificate() == "" || tls.GetPrivateKey() == "" ||
		(mode == apinetworking.ServerTLSSettings_MUTUAL && tls.GetCaCertificates() == "") {
		return nil
	}
	file := func(p string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: p}}
	}
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		// Istio offers HTTP ALPN on every terminated sidecar ingress port.
		AlpnProtocols:   []string{"h2", "http/1.1"},
		TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: file(tls.GetServerCertificate()), PrivateKey: file(tls.GetPrivateKey())}},
	}}
	if mode == apinetworking.ServerTLSSettings_MUTUAL {
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
		ctx.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{
			ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: file(tls.GetCaCertificates())},
		}
	}
	return ctx
}

// inboundListener is virtualInbound for ports: mesh ports through
// virtualInbound (mTLS modes, RBAC), plus, for ports that terminate the
// Sidecar's TLS, the same plaintext chain matched on TLS and wrapped in
// the port's certificate.
func inboundListener(ports []ingressPort, sec inboundSecurity) *listenerv3.Listener {
	var mesh []InboundPort
	var terminated []int32
	for _, ip := range ports {
		if ip.tls == nil {
			mesh = append(mesh, ip.InboundPort)
		} else {
			terminated = append(terminated, ip.Port)
		}
	}
	l := virtualInbound(mesh, terminated, sec)
	for _, ip := range ports {
		if ip.tls == nil {
			continue
		}
		// A sniffed port is served as TCP after termination
		// (sidecarIngress reports it).
		fc := inboundChain(ip.InboundPort, sec)
		fc.FilterChainMatch.TransportProtocol = tlsTransport
		fc.TransportSocket = ip.tls
		l.FilterChains = append(l.FilterChains, fc)
	}
	setInboundInspectors(l)
	return l
}

// sidecarUnsupportedValues lists the Sidecar fields that generation reads
// but whose value here it does not support; they are reported like
// unsupported fields ("ingress[0].captureMode").
func sidecarUnsupportedValues(spec proto.Message) []string {
	s, ok := spec.(*apinetworking.Sidecar)
	if !ok {
		return nil
	}
	var out []string
	for i, l := range s.GetIngress() {
		at := "ingress[" + strconv.Itoa(i) + "]."
		if l.GetCaptureMode() == apinetworking.CaptureMode_NONE {
			out = append(out, at+"captureMode")
		}
		if strings.HasPrefix(l.GetDefaultEndpoint(), "unix://") {
			out = append(out, at+"defaultEndpoint")
		}
		if m := l.GetTls().GetMode(); l.GetTls() != nil && m != apinetworking.ServerTLSSettings_SIMPLE && m != apinetworking.ServerTLSSettings_MUTUAL {
			out = append(out, at+"tls.mode")
		}
	}
	return out
}
