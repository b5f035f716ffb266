package model

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseProxy(t *testing.T) {
	tests := map[string]struct {
		id      string
		meta    map[string]any
		want    *Proxy
		wantErr string // substring of the error; empty for success
	}{
		"reads a sidecar's ID and Istio's metadata": {
			id: "sidecar~10.1.2.3~reviews-v1-abc.default~default.svc.cluster.local",
			meta: map[string]any{
				"NAMESPACE": "default", "SERVICE_ACCOUNT": "reviews", "ISTIO_VERSION": "1.32.0",
				"CLUSTER_ID": "Kubernetes", "WORKLOAD_NAME": "reviews-v1", "INSTANCE_IPS": "10.1.2.3,fd00::3",
				"LABELS": map[string]any{"app": "reviews", "version": "v1"}, "UNKNOWN_KEY": 42.0,
			},
			want: &Proxy{
				ID: "sidecar~10.1.2.3~reviews-v1-abc.default~default.svc.cluster.local", Type: ProxySidecar,
				IPs: []string{"10.1.2.3", "fd00::3"}, PodName: "reviews-v1-abc", Namespace: "default",
				DNSDomain: "default.svc.cluster.local",
				Metadata: ProxyMetadata{
					Namespace: "default", ServiceAccount: "reviews", IstioVersion: "1.32.0", ClusterID: "Kubernetes",
					WorkloadName: "reviews-v1", InstanceIPs: []string{"10.1.2.3", "fd00::3"},
					Labels: map[string]string{"app": "reviews", "version": "v1"},
				},
			},
		},
		"takes the namespace from the ID when metadata has none": {
			id:   "router~127.0.0.1~ingress-1.istio-system~istio-system.svc.cluster.local",
			meta: nil,
			want: &Proxy{
				ID: "router~127.0.0.1~ingress-1.istio-system~istio-system.svc.cluster.local", Type: ProxyRouter,
				IPs: []string{"127.0.0.1"}, PodName: "ingress-1", Namespace: "istio-system",
				DNSDomain: "istio-system.svc.cluster.local", Metadata: ProxyMetadata{Namespace: "istio-system"},
			},
		},
		"reads a proxyless gRPC client's generator": {
			id:   "sidecar~127.0.0.1~client.ns1~ns1.svc.cluster.local",
			meta: map[string]any{"GENERATOR": "grpc"},
			want: &Proxy{
				ID: "sidecar~127.0.0.1~client.ns1~ns1.svc.cluster.local", Type: ProxySidecar,
				IPs: []string{"127.0.0.1"}, PodName: "client", Namespace: "ns1", DNSDomain: "ns1.svc.cluster.local",
				Metadata: ProxyMetadata{Namespace: "ns1", Generator: "grpc"},
			},
		},
		"keeps PROXY_CONFIG's tracing, as compact JSON": {
			id:   "sidecar~127.0.0.1~client.ns1~ns1.svc.cluster.local",
			meta: map[string]any{"PROXY_CONFIG": map[string]any{"concurrency": 2.0, "tracing": map[string]any{"sampling": 10.0, "max_path_tag_length": 99.0}}},
			want: &Proxy{
				ID: "sidecar~127.0.0.1~client.ns1~ns1.svc.cluster.local", Type: ProxySidecar,
				IPs: []string{"127.0.0.1"}, PodName: "client", Namespace: "ns1", DNSDomain: "ns1.svc.cluster.local",
				Metadata: ProxyMetadata{Namespace: "ns1", ProxyConfig: true, Tracing: `{"max_path_tag_length":99,"sampling":10}`},
			},
		},
		"rejects a PROXY_CONFIG that is not an object": {
			id: "sidecar~10.0.0.1~a.b~b.svc.cluster.local", meta: map[string]any{"PROXY_CONFIG": "x"},
			wantErr: "PROXY_CONFIG: is a string, expected an object",
		},
		"rejects an ID with three fields":         {id: "sidecar~10.0.0.1~a.b", wantErr: "has 3 fields"},
		"rejects an empty ID":                     {id: "", wantErr: "has 1 fields"},
		"rejects an unknown proxy type":           {id: "ztunnel~10.0.0.1~a.b~b.svc.cluster.local", wantErr: "neither sidecar nor router"},
		"rejects an IP that is not an address":    {id: "sidecar~10.0.0~a.b~b.svc.cluster.local", wantErr: "not an IP address"},
		"rejects a pod field without namespace":   {id: "sidecar~10.0.0.1~pod~b.svc.cluster.local", wantErr: "is not POD.NAMESPACE"},
		"rejects a domain of another namespace":   {id: "sidecar~10.0.0.1~a.b~c.svc.cluster.local", wantErr: "is not b.svc.DOMAIN"},
		"rejects a domain without cluster suffix": {id: "sidecar~10.0.0.1~a.b~b.svc.", wantErr: "is not b.svc.DOMAIN"},
		"rejects LABELS that are a string": {
			id: "sidecar~10.0.0.1~a.b~b.svc.cluster.local", meta: map[string]any{"LABELS": "app=x"},
			wantErr: "LABELS: is a string, expected an object",
		},
		"rejects a label whose value is a number": {
			id: "sidecar~10.0.0.1~a.b~b.svc.cluster.local", meta: map[string]any{"LABELS": map[string]any{"n": 1.0}},
			wantErr: `label "n" is a number`,
		},
		"rejects INSTANCE_IPS with a bad address": {
			id: "sidecar~10.0.0.1~a.b~b.svc.cluster.local", meta: map[string]any{"INSTANCE_IPS": "10.0.0.1,nope"},
			wantErr: `"nope" is not an IP address`,
		},
		"rejects a NAMESPACE that contradicts the ID": {
			id: "sidecar~10.0.0.1~a.b~b.svc.cluster.local", meta: map[string]any{"NAMESPACE": "c"},
			wantErr: "differs from the namespace",
		},
		"rejects a GENERATOR that is not a string": {
			id: "sidecar~10.0.0.1~a.b~b.svc.cluster.local", meta: map[string]any{"GENERATOR": true},
			wantErr: "GENERATOR: is a boolean",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseProxy(tc.id, tc.meta)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseProxy succeeded with %+v, want an error containing %q", got, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalidNode) {
					t.Fatalf("error %q: want it to contain %q and wrap ErrInvalidNode", err, tc.wantErr)
				}
				if strings.Contains(tc.wantErr, "fields") && !strings.Contains(err.Error(), "TYPE~IP~POD.NAMESPACE") {
					t.Errorf("error %q does not show the expected form", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Raw is every string entry as sent (EnvoyFilter proxy
			// matches read it).
			for k, v := range tc.meta {
				if s, ok := v.(string); ok && got.Metadata.Raw[k] != s {
					t.Errorf("Raw[%s] = %q, want %q", k, got.Metadata.Raw[k], s)
				}
			}
			got.Metadata.Raw = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestProxyClass(t *testing.T) {
	parse := func(id string, meta map[string]any) *Proxy {
		t.Helper()
		p, err := ParseProxy(id, meta)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := parse("sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", map[string]any{"ISTIO_VERSION": "1.32.1"})
	b := parse("sidecar~10.0.0.2~b.ns~ns.svc.cluster.local", map[string]any{"ISTIO_VERSION": "1.32.4", "LABELS": map[string]any{"app": "b"}})
	c := parse("sidecar~10.0.0.3~c.other~other.svc.cluster.local", nil)
	g := parse("sidecar~10.0.0.4~d.ns~ns.svc.cluster.local", map[string]any{"ISTIO_VERSION": "1.32.1", "GENERATOR": "grpc"})
	if a.Class() != b.Class() {
		t.Errorf("sidecars in one namespace and minor version differ: %q vs %q", a.Class(), b.Class())
	}
	if a.Class() == c.Class() || a.Class() == g.Class() {
		t.Errorf("classes of another namespace or generator collide: %q %q %q", a.Class(), c.Class(), g.Class())
	}
}

func FuzzParseProxy(f *testing.F) {
	f.Add("sidecar~10.1.2.3~reviews-v1.default~default.svc.cluster.local", "app", "reviews", "10.1.2.3")
	f.Add("router~::1~gw.istio-system~istio-system.svc.cluster.local", "", "", "")
	f.Add("~~~", "a", "b", ",,")
	f.Fuzz(func(t *testing.T, id, labelKey, labelValue, ips string) {
		meta := map[string]any{"LABELS": map[string]any{labelKey: labelValue}, "INSTANCE_IPS": ips}
		p, err := ParseProxy(id, meta)
		if err != nil {
			if !errors.Is(err, ErrInvalidNode) {
				t.Fatalf("error %v does not wrap ErrInvalidNode", err)
			}
			return
		}
		if p.Namespace == "" || p.PodName == "" || len(p.IPs) == 0 {
			t.Fatalf("accepted %q with an empty field: %+v", id, p)
		}
		if p.Type != ProxySidecar && p.Type != ProxyRouter {
			t.Fatalf("accepted type %q", p.Type)
		}
	})
}
