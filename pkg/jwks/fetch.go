package jwks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// fetcher makes the bounded HTTP requests.
type fetcher struct {
	client   *http.Client
	maxBytes int64
	m        *metrics
}

func newFetcher(o Options, m *metrics) (*fetcher, error) {
	blocked, err := o.blocked()
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if o.CABundle != "" {
		pem, err := os.ReadFile(o.CABundle)
		if err != nil {
			return nil, fmt.Errorf("jwks: CA bundle: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("jwks: CA bundle %s holds no certificate", o.CABundle)
		}
	}
	dialer := &net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("unexpected address %q", address)
		}
		for _, p := range blocked {
			if p.Contains(ap.Addr().Unmap()) {
				return fmt.Errorf("connection to %s refused: in blocked range %s", ap.Addr(), p)
			}
		}
		return nil
	}}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		DisableKeepAlives:   true, // as istiod: a fetch every 20 minutes keeps nothing warm
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig: &tls.Config{
			RootCAs: roots, MinVersion: tls.VersionTLS12,
			InsecureSkipVerify: o.InsecureSkipVerify, //nolint:gosec // the operator's explicit choice
		},
	}
	return &fetcher{client: &http.Client{Transport: tr}, maxBytes: o.MaxBytes, m: m}, nil
}

// get fetches uri within ctx: a 2xx body of at most maxBytes that valid
// accepts. Each call counts as one network fetch, succeeded or failed
// (a body valid refuses fails). Errors never hold the body or the URI's
// query.
func (f *fetcher) get(ctx context.Context, uri string, valid func([]byte) error) (body []byte, err error) {
	defer func() {
		if err != nil {
			f.m.fail.Inc()
		} else {
			f.m.success.Inc()
		}
	}()
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("not an http(s) URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, errors.New("not an http(s) URL")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the URL, query included
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, f.maxBytes))
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, f.maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	if int64(len(body)) > f.maxBytes {
		return nil, fmt.Errorf("body larger than %d bytes", f.maxBytes)
	}
	if err := valid(body); err != nil {
		return nil, err
	}
	return body, nil
}

// keySet fetches the key set of (issuer, uri): uri, or the jwks_uri of
// the issuer's OpenID configuration when uri is empty. It tries
// 1+retries times, wait apart.
func (f *fetcher) keySet(ctx context.Context, issuer, uri string, timeout time.Duration, retries int, wait time.Duration) (string, error) {
	var err error
	for i := 0; ; i++ {
		var keys string
		if keys, err = f.once(ctx, issuer, uri, timeout); err == nil {
			return keys, nil
		}
		if i >= retries || ctx.Err() != nil {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(wait):
		}
	}
}

func (f *fetcher) once(ctx context.Context, issuer, uri string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if uri == "" {
		var cfg struct {
			JWKSURI string `json:"jwks_uri"`
		}
		_, err := f.get(ctx, strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration", func(b []byte) error {
			if json.Unmarshal(b, &cfg) != nil || cfg.JWKSURI == "" {
				return errors.New("no jwks_uri in the configuration")
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("OpenID discovery: %w", err)
		}
		uri = cfg.JWKSURI
	}
	body, err := f.get(ctx, uri, func(b []byte) error {
		var set struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if json.Unmarshal(b, &set) != nil || set.Keys == nil {
			return errors.New("not a JSON Web Key Set (a JSON object with a keys list)")
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return string(body), nil
}

// redact is uri without userinfo, query and fragment, for the log.
func redact(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return "(unparsable)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
