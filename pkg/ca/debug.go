package ca

import (
	"encoding/json"
	"net/http"
	"time"
)

// caStatus is what /debug/ca shows: no key, no token.
type caStatus struct {
	TrustDomain     string    `json:"trustDomain"`
	Mode            string    `json:"mode"`
	SelfSigned      bool      `json:"selfSigned"`
	Root            string    `json:"root"`
	RootNotAfter    time.Time `json:"rootNotAfter"`
	Issuer          string    `json:"issuer"`
	IssuerNotAfter  time.Time `json:"issuerNotAfter"`
	ChainLength     int       `json:"chainLength"`
	ServingNames    []string  `json:"servingNames"`
	ServingNotAfter time.Time `json:"servingNotAfter"`
	// Roots are the trust anchors published; two during a root rotation.
	Roots []string `json:"roots"`
	// RotatingTo is the next root while a rotation is in progress.
	RotatingTo string `json:"rotatingTo,omitempty"`
}

// RegisterDebug serves /debug/ca: the CA in force and the serving
// certificate's expiry.
func (c *CA) RegisterDebug(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/ca", func(w http.ResponseWriter, _ *http.Request) {
		b := c.authority.Bundle()
		st := caStatus{
			TrustDomain: c.opts.TrustDomain, Mode: c.mode(), SelfSigned: b.SelfSigned(),
			Root: b.Root.Subject.String(), RootNotAfter: b.Root.NotAfter,
			Issuer: b.Cert.Subject.String(), IssuerNotAfter: b.Cert.NotAfter, ChainLength: len(b.Chain),
			ServingNames: c.serving.names,
		}
		for _, a := range b.Anchors {
			st.Roots = append(st.Roots, a.Subject.String())
		}
		if next, ok := b.Rotating(); ok {
			st.RotatingTo = next.Subject.String()
		}
		if cert := c.serving.cur.Load(); cert != nil {
			st.ServingNotAfter = cert.Leaf.NotAfter
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
}

func (c *CA) mode() string {
	if c.opts.Dir != "" {
		return "dir"
	}
	if _, rotating := c.authority.Bundle().Rotating(); rotating || c.authority.Bundle().SelfSigned() {
		return "kubernetes:" + SecretSelfSigned
	}
	return "kubernetes:" + SecretPluggedIn
}
