package server

import (
	"slices"
	"time"

	"github.com/meshplane/discovery/pkg/xds/gen"
)

// Verdict is a proxy's answer to one response: an ACK or a NACK, with the
// resources that response carried.
type Verdict struct {
	ProxyID string
	TypeURL string
	Nonce   string
	// Rejected is set for a NACK; Error is then Envoy's error detail.
	Rejected bool
	Error    string
	Time     time.Time
	// Names are the resources of the answered response.
	Names []string
	cfg   *gen.ProxyConfig
}

// Sources returns the Istio configs the answered resources were built from.
// It reads only immutable configuration, so an observer may call it later
// and from any goroutine.
func (v Verdict) Sources() []gen.ConfigRef {
	if v.cfg == nil {
		return nil
	}
	seen := map[gen.ConfigRef]bool{}
	var out []gen.ConfigRef
	for _, n := range v.Names {
		for _, r := range v.cfg.Sources(v.TypeURL, n) {
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// Observer learns of proxies' answers. Its methods are called on the xDS
// path with a stream's lock held: they must return at once (queue, never
// block, never call back into the Server).
type Observer interface {
	// Rejected is called for every NACK of a response this server sent.
	Rejected(Verdict)
	// WantsAccepts reports whether Accepted should be called: ACKs are
	// frequent, so they are passed on only while the observer waits for
	// some.
	WantsAccepts() bool
	// Accepted is called for an ACK while WantsAccepts reports true.
	Accepted(Verdict)
}

// SetObserver makes o learn of every ACK and NACK. Call it before Start.
func (s *Server) SetObserver(o Observer) { s.observer = o }

// answered remembers, per type, the resources of the responses handed to
// the stream and of the last one sent, so that an ACK or NACK, which names
// only a nonce, can be traced to resources.
type answered struct {
	pending map[string]*sentRecord // handed to go-control-plane, not yet seen sent
	last    map[string]*sentRecord // last sent, with its nonce
}

type sentRecord struct {
	resp  any
	nonce string
	// shared, a set's or a view's names, is not the record's own: copying
	// it for every response allocated 139 MB while M1's 1,000 proxies
	// connected, for verdicts that are mostly never asked for. names are
	// the response's other resources.
	shared, names []string
	cfg           *gen.ProxyConfig
}

// allNames is the record's names, in the order the response carried them.
func (r *sentRecord) allNames() []string {
	if len(r.names) == 0 {
		return slices.Clone(r.shared)
	}
	return append(slices.Clip(r.shared), r.names...)
}

// handed records a response just handed to go-control-plane and the
// names of its resources. Called with c.mu held, only with an observer.
func (c *conn) handed(t string, resp any, shared, names []string) {
	if c.answers.pending == nil {
		c.answers.pending, c.answers.last = map[string]*sentRecord{}, map[string]*sentRecord{}
	}
	c.answers.pending[t] = &sentRecord{resp: resp, shared: shared, names: names, cfg: c.cfg}
}

// sentNonce notes the nonce of a response go-control-plane sent. Called
// with c.mu held.
func (c *conn) sentNonce(t string, resp any, nonce string) {
	if p := c.answers.pending[t]; p != nil && p.resp == resp {
		p.nonce = nonce
		// The response itself is not needed any more: holding it held
		// a wrapper per resource for every proxy (640 MB at M1).
		p.resp = nil
		c.answers.last[t] = p
		delete(c.answers.pending, t)
	}
}

// verdict passes an answer to the observer. Called with c.mu held.
func (c *conn) verdict(t, nonce string, errDetail string, rejected bool) {
	o := c.s.observer
	if o == nil || c.proxy == nil {
		return
	}
	rec := c.answers.last[t]
	if rec == nil || rec.nonce != nonce {
		return
	}
	delete(c.answers.last, t) // answered: nothing more will name this nonce
	if !rejected && !o.WantsAccepts() {
		return
	}
	v := Verdict{
		ProxyID: c.proxy.ID, TypeURL: t, Nonce: nonce, Rejected: rejected, Error: errDetail,
		Time: time.Now(), Names: rec.allNames(), cfg: rec.cfg,
	}
	if rejected {
		o.Rejected(v)
		return
	}
	o.Accepted(v)
}

func mapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
