package loadkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Edit is a change to the world: what proxies must hold once it has
// reached them, and the write that makes it.
type Edit struct {
	// Kind is KindEndpoint, KindVirtualSvc, KindServiceAdd or
	// KindServiceRemove.
	Kind string
	// Expects is what a proxy holds once the change reached it.
	Expects []Expectation
	// Write makes the change (a file replaced, or objects applied to the
	// API server); it may be called again after it failed.
	Write func() error
	// Host is the changed service's host name.
	Host string
	// Route is the route a VirtualService edit names (edit-N).
	Route string
}

func clusterName(port int32, host string) string { return fmt.Sprintf("outbound|%d||%s", port, host) }
func routeName(port int32, host string) string   { return fmt.Sprintf("%s:%d", host, port) }

// ChurnEndpoint replaces the last endpoint of a service (the k-th of the
// original ones) by a new address: done at a proxy once it has ACKed the
// service's endpoints on every port with the new address, or with one a
// later change put in its place (addresses only grow, so that is an
// address at least as high).
func (w *World) ChurnEndpoint(k int, n *Names) (*Edit, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.services[k%w.opts.Services]
	if s == nil {
		return nil, errors.New("service removed")
	}
	addr := w.newEndpoint()
	s.Endpoints[len(s.Endpoints)-1] = addr
	e := &Edit{Kind: KindEndpoint, Host: s.host(w.opts.DomainSuffix)}
	for _, p := range servicePorts[:w.opts.Ports] {
		e.Expects = append(e.Expects, Expectation{
			typeURL: typeEDS, name: n.id(clusterName(p.port, s.host(w.opts.DomainSuffix))),
			match: func(d *digest) bool { return hasAddressFrom(d, addr) },
		})
	}
	content := w.serviceYAML(s)
	file := w.serviceFile(s)
	e.Write = func() error { return w.writeFile(file, content) }
	return e, nil
}

// EditVirtualService changes the weights and the first route's name of the
// k-th VirtualService: done at a proxy once it has ACKed the service's
// route configurations on every HTTP port with the new route name, or
// the name of a later edit (a proxy that was away gets only the last).
func (w *World) EditVirtualService(k int, n *Names) (*Edit, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opts.VirtualServices == 0 {
		return nil, errors.New("the world has no VirtualServices (--virtual-services 0)")
	}
	i := k % w.opts.VirtualServices
	w.vsEdits[i]++
	s, edit := w.services[i], w.vsEdits[i]
	e := &Edit{Kind: KindVirtualSvc, Host: s.host(w.opts.DomainSuffix), Route: vsRouteName(edit)}
	for _, p := range servicePorts[:w.opts.Ports] {
		if p.http {
			e.Expects = append(e.Expects, Expectation{
				typeURL: typeRDS, name: n.id(routeName(p.port, s.host(w.opts.DomainSuffix))),
				match: func(d *digest) bool { return hasEditFrom(d, edit) },
			})
		}
	}
	content, file := w.vsYAML(i)
	e.Write = func() error { return w.writeFile(file, content) }
	return e, nil
}

// AddService adds a new service: done at a proxy once it has ACKed the
// service's clusters, their endpoints and its route configurations.
func (w *World) AddService(_ int, n *Names) (*Edit, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.newService()
	host := s.host(w.opts.DomainSuffix)
	e := &Edit{Kind: KindServiceAdd, Host: host}
	for _, p := range servicePorts[:w.opts.Ports] {
		cn := n.id(clusterName(p.port, host))
		e.Expects = append(e.Expects, Expectation{typeURL: typeCDS, name: cn}, Expectation{typeURL: typeEDS, name: cn, match: hasEndpoints})
		if p.http {
			e.Expects = append(e.Expects, Expectation{typeURL: typeRDS, name: n.id(routeName(p.port, host))})
		}
	}
	content, file := w.serviceYAML(s), w.serviceFile(s)
	e.Write = func() error { return w.writeFile(file, content) }
	return e, nil
}

// RemoveService removes the service added last: done at a proxy once its
// clusters no longer hold the service.
func (w *World) RemoveService(_ int, n *Names) (*Edit, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.removeLast(n)
}

func (w *World) removeLast(n *Names) (*Edit, error) {
	i := len(w.services) - 1
	if i < w.opts.Services || w.services[i] == nil {
		return nil, errors.New("no added service to remove")
	}
	s := w.services[i]
	w.services = w.services[:i]
	e := &Edit{Kind: KindServiceRemove, Host: s.host(w.opts.DomainSuffix)}
	for _, p := range servicePorts[:w.opts.Ports] {
		e.Expects = append(e.Expects, Expectation{typeURL: typeCDS, name: n.id(clusterName(p.port, s.host(w.opts.DomainSuffix))), removed: true})
	}
	path := filepath.Join(w.dir, w.serviceFile(s))
	content := w.serviceYAML(s)
	e.Write = func() error {
		if w.kube != nil {
			return w.kube.delete(w.ctx, content)
		}
		return os.Remove(path)
	}
	return e, nil
}
