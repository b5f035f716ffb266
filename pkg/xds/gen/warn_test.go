package gen

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

func TestUnsupportedFields(t *testing.T) {
	vsTests := map[string]struct {
		vs   *networking.VirtualService
		want string
	}{
		"supported fields produce no warning": {
			vs: &networking.VirtualService{Hosts: []string{"a"}, Http: []*networking.HTTPRoute{{
				Match: []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/"}}}},
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "a"}}},
				Fault: &networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{ErrorType: &networking.HTTPFaultInjection_Abort_HttpStatus{HttpStatus: 503}}},
			}}},
		},
		"tcp and tls routes produce no warning": {
			vs: &networking.VirtualService{
				Hosts: []string{"a"},
				Tcp: []*networking.TCPRoute{{
					Match: []*networking.L4MatchAttributes{{Port: 5432, DestinationSubnets: []string{"10.0.0.0/8"}, Gateways: []string{"mesh"}}},
					Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "a"}, Weight: 100}},
				}},
				Tls: []*networking.TLSRoute{{
					Match: []*networking.TLSMatchAttributes{{SniHosts: []string{"a.example.com"}, Port: 443}},
					Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "a"}}},
				}},
			},
		},
		"unsupported fields are named with their index": {
			vs: &networking.VirtualService{Hosts: []string{"a"}, Http: []*networking.HTTPRoute{
				{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "a"}}}},
				{
					Delegate: &networking.Delegate{Name: "d"},
					Match:    []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"app": "x"}, StatPrefix: "s"}},
					Retries:  &networking.HTTPRetry{Attempts: 2, RetryRemoteLocalities: wrapperspb.Bool(true)},
				},
			}, Tcp: []*networking.TCPRoute{{Match: []*networking.L4MatchAttributes{{Port: 1, SourceLabels: map[string]string{"app": "x"}}}}}},
			want: "http[1].match[0].statPrefix,http[1].retries.retryRemoteLocalities",
		},
	}
	for name, tc := range vsTests {
		t.Run(name, func(t *testing.T) {
			if got := strings.Join(unsupportedFields(tc.vs, vsFields), ","); got != tc.want {
				t.Errorf("unsupported %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("subset and port-level policies take the same fields as the top level", func(t *testing.T) {
		dr := &networking.DestinationRule{Host: "a", Subsets: []*networking.Subset{{
			Name: "v1", TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM}},
				PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{
					Port: &networking.PortSelector{Number: 80},
					Tls:  &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL},
				}},
				Tunnel: &networking.TrafficPolicy_TunnelSettings{Protocol: "CONNECT"},
			},
		}}}
		if got := strings.Join(unsupportedFields(dr, drFields), ","); got != "subsets[0].trafficPolicy.tunnel" {
			t.Errorf("unsupported %q, want subsets[0].trafficPolicy.tunnel", got)
		}
	})
}
