package model

import (
	"testing"

	apinetworking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
)

func TestParseProtocol(t *testing.T) {
	for in, want := range map[string]Protocol{
		"": ProtocolUnknown, "HTTP": ProtocolHTTP, "http": ProtocolHTTP, "HTTP2": ProtocolHTTP2,
		"GRPC": ProtocolGRPC, "GRPC-Web": ProtocolGRPC, "HTTPS": ProtocolHTTPS, "TLS": ProtocolTLS,
		"TCP": ProtocolTCP, "UDP": ProtocolUDP, "Mongo": ProtocolMongo, "Redis": ProtocolRedis,
		"MySQL": ProtocolMySQL,
		// Names Kubernetes appProtocol knows, Istio's protocol.Parse not.
		"h2c": ProtocolUnknown, "http1": ProtocolUnknown, "kubernetes.io/h2c": ProtocolUnknown,
		"foo": ProtocolUnknown,
	} {
		if got := ParseProtocol(in); got != want {
			t.Errorf("ParseProtocol(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestServiceEntryPortProtocols: a ServiceEntry port's protocol is its
// protocol field as Istio's protocol.Parse reads it (convertPort); the
// port's name is not read, unlike a Kubernetes Service's.
func TestServiceEntryPortProtocols(t *testing.T) {
	s := NewStore(StoreOptions{})
	_, err := s.Apply(serviceEntry("ext", "api", "1", &apinetworking.ServiceEntry{
		Hosts: []string{"api.example.com"},
		Ports: []*apinetworking.ServicePort{
			{Number: 80, Name: "http"},
			{Number: 81, Name: "tcp-x", Protocol: "HTTP"},
			{Number: 53, Name: "dns", Protocol: "udp"},
			{Number: 82, Name: "http2", Protocol: "h2c"},
		},
		Resolution: apinetworking.ServiceEntry_DNS,
	}))
	if err != nil {
		t.Fatal(err)
	}
	svc := s.World().ServiceByHost("api.example.com")
	if svc == nil || len(svc.Ports) != 4 {
		t.Fatalf("service %+v, want its four ports", svc)
	}
	for port, want := range map[int32]Protocol{80: ProtocolUnknown, 81: ProtocolHTTP, 53: ProtocolUDP, 82: ProtocolUnknown} {
		if p, _ := svc.PortByNumber(port); p.Protocol != want {
			t.Errorf("port %d: %q, want %q", port, p.Protocol, want)
		}
	}
}

// TestServicePortProtocols: a Kubernetes Service port's protocol is read
// as Istio's kube.ConvertProtocol reads it: UDP first; then appProtocol
// alone when set (its three kubernetes.io names included), else the
// port name's prefix before the first dash (grpc-web whole), each with
// protocol.Parse; what that does not know is UnsupportedProtocol, which
// Istio sniffs, except on the well-known server-first ports 25, 53, 3306
// and 27017, which are TCP.
func TestServicePortProtocols(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := map[string]struct {
		port corev1.ServicePort
		want Protocol
	}{
		"an unnamed port is sniffed":                            {corev1.ServicePort{Port: 8080}, ProtocolUnknown},
		"a name Istio does not know is sniffed":                 {corev1.ServicePort{Name: "db", Port: 5432}, ProtocolUnknown},
		"a prefix Istio does not know is sniffed":               {corev1.ServicePort{Name: "web-ui", Port: 8081}, ProtocolUnknown},
		"an http prefix is HTTP":                                {corev1.ServicePort{Name: "http-web", Port: 80}, ProtocolHTTP},
		"names are read case-insensitively":                     {corev1.ServicePort{Name: "HTTP2-x", Port: 81}, ProtocolHTTP2},
		"grpc-web is read whole":                                {corev1.ServicePort{Name: "grpc-web-x", Port: 82}, ProtocolGRPC},
		"a tcp prefix is TCP":                                   {corev1.ServicePort{Name: "tcp-db", Port: 5433}, ProtocolTCP},
		"UDP wins over the name":                                {corev1.ServicePort{Name: "http", Port: 53, Protocol: corev1.ProtocolUDP}, ProtocolUDP},
		"an unnamed MySQL port is TCP (server first)":           {corev1.ServicePort{Port: 3306}, ProtocolTCP},
		"an unnamed SMTP port is TCP":                           {corev1.ServicePort{Port: 25}, ProtocolTCP},
		"an unnamed DNS port over TCP is TCP":                   {corev1.ServicePort{Port: 53}, ProtocolTCP},
		"an unnamed MongoDB port is TCP":                        {corev1.ServicePort{Port: 27017}, ProtocolTCP},
		"a well-known port with a known name keeps it":          {corev1.ServicePort{Name: "http", Port: 25}, ProtocolHTTP},
		"appProtocol wins over the name":                        {corev1.ServicePort{Name: "tcp-x", Port: 83, AppProtocol: str("http")}, ProtocolHTTP},
		"an unknown appProtocol is sniffed, whatever the name":  {corev1.ServicePort{Name: "http", Port: 84, AppProtocol: str("foo")}, ProtocolUnknown},
		"appProtocol kubernetes.io/h2c is HTTP2":                {corev1.ServicePort{Port: 85, AppProtocol: str("kubernetes.io/h2c")}, ProtocolHTTP2},
		"appProtocol kubernetes.io/ws is HTTP":                  {corev1.ServicePort{Port: 86, AppProtocol: str("kubernetes.io/ws")}, ProtocolHTTP},
		"appProtocol kubernetes.io/wss is HTTPS":                {corev1.ServicePort{Port: 87, AppProtocol: str("kubernetes.io/wss")}, ProtocolHTTPS},
		"appProtocol h2c is not a name protocol.Parse knows":    {corev1.ServicePort{Port: 88, AppProtocol: str("h2c")}, ProtocolUnknown},
		"a name http1 is not one protocol.Parse knows either":   {corev1.ServicePort{Name: "http1", Port: 89}, ProtocolUnknown},
		"an unknown appProtocol on a well-known port is TCP":    {corev1.ServicePort{Port: 3306, AppProtocol: str("foo")}, ProtocolTCP},
		"a mysql name on another port is MySQL, not well-known": {corev1.ServicePort{Name: "mysql", Port: 3307}, ProtocolMySQL},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := NewStore(StoreOptions{})
			if _, err := s.Apply(Event{Op: OpUpsert, Key: Key{KindService, "ns", "svc"}, Object: svc("ns", "svc", tc.port)}); err != nil {
				t.Fatal(err)
			}
			got := s.World().Service("ns", "svc")
			if got == nil || len(got.Ports) != 1 {
				t.Fatalf("service %+v, want one port", got)
			}
			if got.Ports[0].Protocol != tc.want {
				t.Errorf("protocol %q, want %q", got.Ports[0].Protocol, tc.want)
			}
		})
	}
}
