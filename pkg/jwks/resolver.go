package jwks

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	"github.com/meshplane/discovery/pkg/model"
)

// Store is what the Resolver needs of model.Store.
type Store interface {
	World() *model.World
	Subscribe(fn func(*model.Update))
	Apply(events ...model.Event) (*model.Update, error)
}

var _ Store = (*model.Store)(nil)

// Resolver keeps the World's key sets in step with the policies that
// name them (doc.go).
type Resolver struct {
	o     Options
	store Store
	log   *slog.Logger
	f     *fetcher
	wake  chan struct{}
}

// New builds a Resolver; Start runs it.
func New(o Options, store Store, log *slog.Logger, reg prometheus.Registerer) (*Resolver, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	f, err := newFetcher(o, m)
	if err != nil {
		return nil, err
	}
	return &Resolver{o: o, store: store, log: log, f: f, wake: make(chan struct{}, 1)}, nil
}

// entry is one key set the policies name.
type entry struct {
	issuer, uri string
	timeout     time.Duration
	keys        string    // the last good key set, "" for none
	lastGood    time.Time // when it was fetched
	next        time.Time // when to fetch next
	backoff     time.Duration
	fetched     bool // a fetch was made
	inflight    bool
}

type result struct {
	key   model.Key
	keys  string
	err   error
	first bool
}

// Start fetches and refreshes key sets until ctx ends.
func (r *Resolver) Start(ctx context.Context) error {
	r.store.Subscribe(func(u *model.Update) {
		for _, c := range u.Changes {
			if c.Key.Kind == model.KindRequestAuthentication {
				r.signal()
				return
			}
		}
	})
	r.signal() // the policies already in the World
	entries := map[model.Key]*entry{}
	results := make(chan result)
	sem := make(chan struct{}, r.o.Concurrency)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			r.sync(entries)
		case res := <-results:
			r.record(entries, res)
		case <-timer.C:
		}
		timer.Reset(r.dispatch(ctx, entries, results, sem))
	}
}

func (r *Resolver) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// needed are the key sets the World's policies name, with the longest
// timeout a rule gives each (bounded by MaxTimeout).
func (r *Resolver) needed(w *model.World) map[model.Key]*entry {
	out := map[model.Key]*entry{}
	for _, c := range w.Configs(model.KindRequestAuthentication) {
		ra, ok := c.Object.(*securityv1.RequestAuthentication)
		if !ok {
			continue
		}
		for _, rule := range ra.Spec.GetJwtRules() {
			if rule.GetJwks() != "" || (rule.GetIssuer() == "" && rule.GetJwksUri() == "") {
				continue
			}
			t := r.o.DefaultTimeout
			if d := rule.GetTimeout(); d != nil && d.AsDuration() > 0 {
				t = d.AsDuration()
			}
			t = min(t, r.o.MaxTimeout)
			k := model.JWKSKey(rule.GetIssuer(), rule.GetJwksUri())
			if e := out[k]; e != nil {
				e.timeout = max(e.timeout, t)
				continue
			}
			out[k] = &entry{issuer: rule.GetIssuer(), uri: rule.GetJwksUri(), timeout: t}
		}
	}
	return out
}

// sync adds the key sets the policies newly name (due at once) and drops
// those they no longer name, from the World too.
func (r *Resolver) sync(entries map[model.Key]*entry) {
	want := r.needed(r.store.World())
	var drop []model.Event
	for k := range entries {
		if want[k] == nil {
			delete(entries, k)
			drop = append(drop, model.Event{Op: model.OpDelete, Key: k})
		}
	}
	for k, w := range want {
		if e := entries[k]; e != nil {
			e.timeout = w.timeout
			continue
		}
		w.next = time.Now()
		entries[k] = w
	}
	if len(drop) > 0 {
		r.apply(drop...)
	}
}

// dispatch starts the fetches that are due and returns how long until
// the next one is.
func (r *Resolver) dispatch(ctx context.Context, entries map[model.Key]*entry, results chan<- result, sem chan struct{}) time.Duration {
	now := time.Now()
	wait := time.Hour
	for k, e := range entries {
		if e.inflight {
			continue
		}
		if d := e.next.Sub(now); d > 0 {
			wait = min(wait, d)
			continue
		}
		e.inflight = true
		first, retries := !e.fetched, r.o.Retries
		if first {
			retries = 0 // istiod's main flow: no retry before the first answer
		}
		go func(k model.Key, issuer, uri string, timeout time.Duration) {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			keys, err := r.f.keySet(ctx, issuer, uri, timeout, retries, r.o.RetryInterval)
			<-sem
			select {
			case results <- result{key: k, keys: keys, err: err, first: first}:
			case <-ctx.Done():
			}
		}(k, e.issuer, e.uri, e.timeout)
	}
	return wait
}

// record applies one fetch's outcome to its entry and the World.
func (r *Resolver) record(entries map[model.Key]*entry, res result) {
	e := entries[res.key]
	if e == nil {
		return // no policy names it any more
	}
	now := time.Now()
	e.inflight, e.fetched = false, true
	if res.err == nil {
		e.keys, e.lastGood, e.backoff, e.next = res.keys, now, 0, now.Add(r.o.RefreshInterval)
		r.apply(model.Event{Key: res.key, Object: &model.JWKS{Issuer: e.issuer, URI: e.uri, Keys: e.keys}})
		return
	}
	switch {
	case res.first:
		e.next = now.Add(r.o.RetryInterval) // then a refresh with retries
	case e.backoff == 0:
		e.backoff = r.o.RefreshIntervalOnFailure
	default:
		e.backoff = min(2*e.backoff, r.o.MaxRefreshIntervalOnFailure)
	}
	if !res.first {
		e.next = now.Add(e.backoff)
	}
	kept := e.keys != "" && now.Sub(e.lastGood) < r.o.EvictionDuration
	r.log.Warn("JWKS fetch failed", "issuer", e.issuer, "jwksUri", redact(e.uri), "error", res.err.Error(),
		"keptLastGoodKeys", kept, "nextAttemptIn", e.next.Sub(now).Round(time.Millisecond).String())
	if kept {
		return
	}
	e.keys = ""
	r.apply(model.Event{Key: res.key, Object: &model.JWKS{Issuer: e.issuer, URI: e.uri, Failed: true, Error: res.err.Error()}})
}

func (r *Resolver) apply(evs ...model.Event) {
	if _, err := r.store.Apply(evs...); err != nil {
		r.log.Error("JWKS not handed to the model", "error", err)
	}
}
