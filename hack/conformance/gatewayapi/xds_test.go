package gatewayapi

import (
	"context"
	"fmt"
	"sort"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshplane/discovery/hack/conformance/dataplane"
	"github.com/meshplane/discovery/hack/conformance/scenario"
)

const (
	typeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	typeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// fetch asks discovery's xDS server at addr for the whole configuration
// of the proxy node, as Envoy does on connecting (CDS and LDS, then the
// EDS and RDS they name), ACKing every response, and returns it for the
// evaluator.
func fetch(ctx context.Context, addr string, node *corev3.Node) (*dataplane.Config, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	send := func(typeURL string, names []string, version, nonce string) error {
		return st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names, VersionInfo: version, ResponseNonce: nonce})
	}
	if err := send(typeCluster, nil, "", ""); err != nil {
		return nil, err
	}
	if err := send(typeListener, nil, "", ""); err != nil {
		return nil, err
	}
	cfg := &dataplane.Config{}
	// want: the types still awaited, with the names asked for.
	want := map[string][]string{typeCluster: nil, typeListener: nil}
	for len(want) > 0 {
		resp, err := st.Recv()
		if err != nil {
			return nil, fmt.Errorf("xDS stream: %w (still waiting for %d types)", err, len(want))
		}
		if _, ok := want[resp.TypeUrl]; !ok {
			// A later push of a type already held: ACK it, keep the
			// first answer (the suite retries, a fresh fetch sees it).
			_ = send(resp.TypeUrl, nil, resp.VersionInfo, resp.Nonce)
			continue
		}
		delete(want, resp.TypeUrl)
		var next []string
		for _, a := range resp.Resources {
			m, err := a.UnmarshalNew()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", resp.TypeUrl, err)
			}
			switch x := m.(type) {
			case *clusterv3.Cluster:
				cfg.Clusters = append(cfg.Clusters, x)
				if x.GetType() == clusterv3.Cluster_EDS {
					name := x.GetName()
					if sn := x.GetEdsClusterConfig().GetServiceName(); sn != "" {
						name = sn
					}
					next = append(next, name)
				}
			case *listenerv3.Listener:
				cfg.Listeners = append(cfg.Listeners, x)
				next = append(next, routeNames(x)...)
			case *routev3.RouteConfiguration:
				cfg.Routes = append(cfg.Routes, x)
			case *endpointv3.ClusterLoadAssignment:
				cfg.Endpoints = append(cfg.Endpoints, x)
			}
		}
		if err := send(resp.TypeUrl, requested(resp), resp.VersionInfo, resp.Nonce); err != nil {
			return nil, err
		}
		next = uniq(next)
		if len(next) == 0 {
			continue
		}
		switch resp.TypeUrl {
		case typeCluster:
			want[typeEndpoint] = next
			err = send(typeEndpoint, next, "", "")
		case typeListener:
			want[typeRoute] = next
			err = send(typeRoute, next, "", "")
		}
		if err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// requested is what an ACK of resp subscribes to: wildcard for CDS and
// LDS, the names received for the others.
func requested(resp *discoveryv3.DiscoveryResponse) []string {
	if resp.TypeUrl == typeCluster || resp.TypeUrl == typeListener {
		return nil
	}
	var names []string
	for _, a := range resp.Resources {
		m, err := a.UnmarshalNew()
		if err != nil {
			continue
		}
		switch x := m.(type) {
		case *routev3.RouteConfiguration:
			names = append(names, x.GetName())
		case *endpointv3.ClusterLoadAssignment:
			names = append(names, x.GetClusterName())
		}
	}
	return names
}

// routeNames are the RDS names of a listener's HTTP connection managers.
func routeNames(l *listenerv3.Listener) []string {
	var out []string
	for _, fc := range append(l.GetFilterChains(), l.GetDefaultFilterChain()) {
		for _, f := range fc.GetFilters() {
			if f.GetTypedConfig() == nil {
				continue
			}
			var hcm hcmv3.HttpConnectionManager
			if f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
				continue
			}
			if n := hcm.GetRds().GetRouteConfigName(); n != "" {
				out = append(out, n)
			}
		}
	}
	return out
}

func uniq(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// gatewayNode is the node a gateway Pod's pilot-agent presents.
func gatewayNode(ip, pod, ns string, podLabels map[string]string) (*corev3.Node, error) {
	lbls := map[string]any{}
	for k, v := range podLabels {
		lbls[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "LABELS": lbls, "NAME": pod, "CLUSTER_ID": "Kubernetes"})
	if err != nil {
		return nil, err
	}
	return &corev3.Node{Id: "router~" + ip + "~" + pod + "." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}, nil
}

// sidecarNode is the node an injected Pod's pilot-agent presents, with
// the metadata it sends (scenario's nodes carry the same for the istiod
// comparison).
func sidecarNode(pod *corev1.Pod) (*corev3.Node, error) {
	lbls := map[string]any{}
	for k, v := range pod.Labels {
		lbls[k] = v
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ip, ns := pod.Status.PodIP, pod.Namespace
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": ns, "LABELS": lbls, "NAME": pod.Name, "CLUSTER_ID": "Kubernetes",
		"ISTIO_VERSION": scenario.IstioVersion, "SERVICE_ACCOUNT": sa, "INSTANCE_IPS": ip,
		"INTERCEPTION_MODE": "REDIRECT", "MESH_ID": "cluster.local", "NODE_NAME": pod.Spec.NodeName,
		"WORKLOAD_NAME": pod.Labels[ownerLabel],
	})
	if err != nil {
		return nil, err
	}
	return &corev3.Node{Id: "sidecar~" + ip + "~" + pod.Name + "." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}, nil
}
