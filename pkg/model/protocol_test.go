package model

import (
	"testing"

	apinetworking "istio.io/api/networking/v1alpha3"
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
			{Number: 80, Name: "http"}, {Number: 81, Name: "tcp-x", Protocol: "HTTP"}, {Number: 53, Name: "dns", Protocol: "udp"},
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
