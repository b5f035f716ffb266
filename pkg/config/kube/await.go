package kube

import (
	"errors"
	"net"
	"net/http"
	"time"
)

// The informers' reads wait for an API server that cannot be reached
// instead of failing. client-go's reflectors back off after each failed
// list or watch, doubling up to a cap of 30 s with a jitter of 1.0
// (tools/cache/reflector.go): after an outage of a minute a reflector
// sleeps 30 to 60 s before it tries again, whenever the API server came
// back, and a shared informer offers no way to change that. istiod reads
// through the same reflectors. Here a read (GET: every list and watch)
// whose connection cannot even be made is tried again, at awaitMin
// doubling to awaitMax, for as long as its context lives: the reflector
// sees one slow list instead of a run of failures, and the World catches
// up within awaitMax of the API server's return (RELIABILITY.md, scenario
// 2). A refused connection costs the API server nothing, so trying every
// few seconds adds no load; anything else (an HTTP error, a reset stream)
// goes to client-go as it is.

const (
	awaitMin = 250 * time.Millisecond
	awaitMax = 2 * time.Second
)

// awaitTransport is an http.RoundTripper that retries GETs that could not
// connect.
type awaitTransport struct {
	next     http.RoundTripper
	min, max time.Duration
}

// awaitAPIServer wraps rt (rest.Config.WrapTransport).
func awaitAPIServer(rt http.RoundTripper) http.RoundTripper {
	return &awaitTransport{next: rt, min: awaitMin, max: awaitMax}
}

// RoundTrip sends req; a GET that cannot connect is sent again until it
// connects or its context ends (then the last error is returned).
func (t *awaitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody {
		return t.next.RoundTrip(req)
	}
	wait := t.min
	for {
		resp, err := t.next.RoundTrip(req)
		if err == nil || !unreachable(err) {
			return resp, err
		}
		timer := time.NewTimer(wait)
		select {
		case <-req.Context().Done():
			timer.Stop()
			return nil, err
		case <-timer.C:
		}
		wait = min(2*wait, t.max)
	}
}

// unreachable reports whether err says that no connection could be made
// (refused, no route, dial timeout): nothing was sent, so sending again
// is safe.
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
