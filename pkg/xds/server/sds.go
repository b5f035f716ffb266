package server

import (
	"crypto/sha256"
	"encoding/hex"
	"iter"
	"maps"
	"sort"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshplane/discovery/pkg/credentials"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Gateway credentials (Gateway tls.credentialName) are served here as SDS
// Secrets over ADS, state of the world and delta, by name only
// (kubernetes://[NS/]NAME[-cacert], see gen.ParseCredential). A Secret goes
// only to an authenticated stream (streamauth verified its caller: the TLS
// port) of a router proxy (gateway) whose verified namespace is the
// Secret's, as istiod serves SDS only to a proxy with a verified identity.
// The plaintext port authenticates nobody, so whatever a node ID there
// claims, it is sent no credential. Any other request gets nothing for
// that name, a WARN log line once per stream and name (never any
// material), and discovery_xds_secrets_denied_total.

// Deny reasons, the counter's label.
const (
	denyUnauthenticated = "unauthenticated"
	denyNotGateway      = "not_gateway"
	denyOtherNamespace  = "other_namespace"
	denyBadName         = "bad_name"
)

// secretState is what one stream was sent of Secrets.
type secretState struct {
	sent   map[string]*gen.Resource // for /debug/config_dump
	denied map[string]bool          // names already logged as denied
}

// useCredentials makes the server serve gateway credentials read from r
// over ADS (Options.Credentials; the generator was told by New).
func (s *Server) useCredentials(r credentials.Reader, reg prometheus.Registerer) error {
	denied := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "discovery_xds_secrets_denied_total",
		Help: "SDS requests for a gateway credential the proxy may not read (unauthenticated stream, not a gateway, another namespace, or a name that is not a credential), by reason.",
	}, []string{"reason"})
	if err := reg.Register(denied); err != nil {
		return err
	}
	s.creds, s.credsDenied = r, denied
	r.OnChange(s.credentialChanged)
	return nil
}

// credentialChanged answers the open Secret watches of the gateways of
// namespace ns; each sends only what changed for it.
func (s *Server) credentialChanged(ns, _ string) {
	s.conns.Range(func(_, v any) bool {
		c := v.(*conn)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed || c.proxy == nil || c.proxy.Type != model.ProxyRouter || c.proxy.Namespace != ns {
			return true
		}
		ts := c.of(gen.SecretType)
		if w := ts.sotw; w != nil && c.respondSotw(w, nil) {
			ts.sotw = nil
		}
		if w := ts.delta; w != nil && c.respondDelta(w, nil) {
			ts.delta = nil
		}
		return true
	})
}

// credential resolves one requested name for the stream's proxy: the
// Secret resource, or nil when it does not exist (yet) or may not be read.
// Called with c.mu held.
func (c *conn) credential(name string) *gen.Resource {
	p := c.proxy
	cred, ok := gen.ParseCredential(name)
	reason := ""
	switch {
	case !ok:
		reason = denyBadName
	case c.caller == nil:
		reason = denyUnauthenticated
	case p.Type != model.ProxyRouter:
		reason = denyNotGateway
	case c.caller.Namespace != p.Namespace, cred.Namespace != "" && cred.Namespace != p.Namespace:
		// streamauth refuses a node of another namespace; checked again
		// here, where the key would leave the process.
		reason = denyOtherNamespace
	}
	if reason != "" {
		c.denySecret(name, reason)
		return nil
	}
	if c.s.creds == nil {
		return nil
	}
	var r *gen.Resource
	var err error
	if cred.CA {
		// Istio's order: the Secret NAME-cacert, else NAME's ca.crt.
		t, ok := c.s.creds.Get(p.Namespace, cred.Name+gen.CredentialCASuffix)
		if !ok || len(t.CA) == 0 {
			t, ok = c.s.creds.Get(p.Namespace, cred.Name)
		}
		if !ok || len(t.CA) == 0 {
			return nil
		}
		r, err = gen.CASecret(name, t.CA)
	} else {
		t, ok := c.s.creds.Get(p.Namespace, cred.Name)
		if !ok || !t.HasCertificate() {
			return nil
		}
		r, err = gen.CertificateSecret(name, t.Cert, t.Key)
	}
	if err != nil {
		// The error names the field, never its content.
		c.logger().Error("cannot build gateway credential", "secret", p.Namespace+"/"+cred.Name, "error", err)
		return nil
	}
	return r
}

func (c *conn) denySecret(name, reason string) {
	if c.s.credsDenied != nil {
		c.s.credsDenied.WithLabelValues(reason).Inc()
	}
	if c.secrets.denied == nil {
		c.secrets.denied = map[string]bool{}
	}
	if c.secrets.denied[name] {
		return
	}
	c.secrets.denied[name] = true
	c.logger().Warn("proxy asked for a secret it may not read; sent nothing for it",
		"resource", name, "reason", reason, "proxyType", string(c.proxy.Type), "namespace", c.proxy.Namespace)
}

// credentials resolves every subscribed name that exists and may be read.
// A wildcard subscription names nothing: Secrets are asked for by name.
func (c *conn) credentials(subscribed iter.Seq[string]) map[string]*gen.Resource {
	out := map[string]*gen.Resource{}
	for n := range subscribed {
		if r := c.credential(n); r != nil {
			out[n] = r
		}
	}
	return out
}

// respondSecretSotw sends every subscribed Secret the proxy may read when
// any of them changed, or on the first request. Called with c.mu held.
func (c *conn) respondSecretSotw(w *sotwWatch, initial bool) bool {
	returned := w.sub.ReturnedResources()
	cur := c.credentials(maps.Keys(w.sub.SubscribedResources()))
	next := make(map[string]string, len(cur))
	changed := initial || len(cur) != len(returned)
	for n, r := range cur {
		next[n] = r.Hash
		changed = changed || returned[n] != r.Hash
	}
	if !changed {
		return false
	}
	send := sortedResources(cur)
	resp := &discovery.DiscoveryResponse{VersionInfo: secretsVersion(send), TypeUrl: gen.SecretType, Resources: anys(send)}
	if !c.deliverSotw(w, resp, next, nil) {
		return false
	}
	c.secrets.sent = cur
	return true
}

// respondSecretDelta sends the subscribed Secrets that changed and removes
// those that are gone or may no longer be read. Called with c.mu held.
func (c *conn) respondSecretDelta(w *deltaWatch) bool {
	returned := w.sub.returned
	cur := c.credentials(w.sub.names.all())
	var send []*gen.Resource
	for _, r := range sortedResources(cur) {
		if returned[r.Name] != r.Hash {
			send = append(send, r)
		}
	}
	var removed []string
	for n := range returned {
		if cur[n] == nil {
			removed = append(removed, n)
		}
	}
	if len(send) == 0 && len(removed) == 0 && !w.initial {
		return false
	}
	sort.Strings(removed)
	res := make([]*discovery.Resource, len(send))
	for i, r := range send {
		res[i] = &discovery.Resource{Name: r.Name, Version: r.Hash, Resource: r.Wire()}
	}
	resp := &discovery.DeltaDiscoveryResponse{
		SystemVersionInfo: secretsVersion(sortedResources(cur)),
		TypeUrl:           gen.SecretType, Resources: res, RemovedResources: removed,
	}
	if !c.deliverDelta(w, resp, returned) {
		return false
	}
	// As in respondDelta, the returned map is updated in place (gcp.go);
	// no base holds Secrets, so a removed name leaves the map.
	markReturned(returned, send)
	forgetReturned(returned, removed)
	c.secrets.sent = cur
	return true
}

func sortedResources(m map[string]*gen.Resource) []*gen.Resource {
	out := make([]*gen.Resource, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func secretsVersion(rs []*gen.Resource) string {
	h := sha256.New()
	for _, r := range rs {
		h.Write([]byte(r.Name + "\x00" + r.Hash + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// secretsDump is the Secrets sent on the stream, private keys redacted;
// nil when none were sent. Called without c.mu.
func (c *conn) secretsDump() (*anypb.Any, error) {
	c.mu.Lock()
	sent := sortedResources(c.secrets.sent)
	c.mu.Unlock()
	if len(sent) == 0 {
		return nil, nil
	}
	dump := &adminv3.SecretsConfigDump{}
	for _, r := range sent {
		var s tlsv3.Secret
		if err := r.Any.UnmarshalTo(&s); err != nil {
			return nil, err
		}
		a, err := anypb.New(gen.RedactSecret(&s))
		if err != nil {
			return nil, err
		}
		dump.DynamicActiveSecrets = append(dump.DynamicActiveSecrets, &adminv3.SecretsConfigDump_DynamicSecret{
			Name: r.Name, VersionInfo: r.Hash, Secret: a,
		})
	}
	return anypb.New(dump)
}
