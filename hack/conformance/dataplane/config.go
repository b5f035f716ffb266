// Package dataplane decides what a proxy would do with a request, given
// the xDS configuration a control plane sent it: the behaviour of Envoy
// (or of a proxyless gRPC client) read from its listeners, routes,
// clusters and endpoints, not the bytes of that configuration.
//
// In: a Config (the resources one proxy holds) and a Request (a connection
// and, for HTTP, one request on it, as the application or a peer sends it).
// Out: a Decision: where the request goes (upstream clusters by their
// content, with weights, TLS, endpoints), or what answers it (a direct
// response, a redirect, an RBAC denial, a reset), and the policies on the
// way (timeouts, retries, faults, header changes, rewrites, mirrors).
// Resource names are not part of a Decision: two configurations that
// behave alike decide alike.
package dataplane

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// Config is the xDS state one proxy holds.
type Config struct {
	Listeners []*listenerv3.Listener
	Clusters  []*clusterv3.Cluster
	Routes    []*routev3.RouteConfiguration
	Endpoints []*endpointv3.ClusterLoadAssignment

	listeners map[string]*listenerv3.Listener
	clusters  map[string]*clusterv3.Cluster
	routes    map[string]*routev3.RouteConfiguration
	endpoints map[string]*endpointv3.ClusterLoadAssignment
}

func (c *Config) index() {
	if c.clusters != nil {
		return
	}
	c.listeners = map[string]*listenerv3.Listener{}
	c.clusters = map[string]*clusterv3.Cluster{}
	c.routes = map[string]*routev3.RouteConfiguration{}
	c.endpoints = map[string]*endpointv3.ClusterLoadAssignment{}
	for _, l := range c.Listeners {
		c.listeners[l.GetName()] = l
	}
	for _, x := range c.Clusters {
		c.clusters[x.GetName()] = x
	}
	for _, r := range c.Routes {
		c.routes[r.GetName()] = r
	}
	for _, e := range c.Endpoints {
		c.endpoints[e.GetClusterName()] = e
	}
}

// Listener returns the listener of that name (nil if none).
func (c *Config) Listener(name string) *listenerv3.Listener { c.index(); return c.listeners[name] }

// Cluster returns the cluster of that name (nil if none).
func (c *Config) Cluster(name string) *clusterv3.Cluster { c.index(); return c.clusters[name] }

// Route returns the route configuration of that name (nil if none).
func (c *Config) Route(name string) *routev3.RouteConfiguration { c.index(); return c.routes[name] }

// LoadAssignment returns the endpoints of that EDS service name (nil if none).
func (c *Config) LoadAssignment(name string) *endpointv3.ClusterLoadAssignment {
	c.index()
	return c.endpoints[name]
}
