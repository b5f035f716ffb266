// Package proxystatus is the client side of `discovery proxy-status`: it
// reads /debug/syncz from a discovery instance and prints, for every
// connected proxy, whether each xDS type is in sync, as istioctl
// proxy-status does.
package proxystatus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// TypeStatus is one xDS type of one proxy, as /debug/syncz reports it.
type TypeStatus struct {
	SentVersion  string `json:"sentVersion"`
	SentNonce    string `json:"sentNonce"`
	AckedVersion string `json:"ackedVersion"`
	NACKs        int    `json:"nacks"`
	LastNACK     *struct {
		Nonce   string `json:"nonce"`
		Message string `json:"message"`
	} `json:"lastNack"`
}

// Proxy is one row of /debug/syncz.
type Proxy struct {
	// ID is the proxy's full node ID.
	ID string `json:"node"`
	// Name is <pod>.<namespace>, as Istio names proxies.
	Name      string                 `json:"proxy"`
	Class     string                 `json:"class"`
	Delta     bool                   `json:"delta"`
	Connected time.Time              `json:"connected"`
	Types     map[string]*TypeStatus `json:"types"`
}

// Fetch reads /debug/syncz from baseURL (http://HOST:15014).
func Fetch(ctx context.Context, client *http.Client, baseURL string) ([]Proxy, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+"/debug/syncz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read syncz: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("read syncz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var out []Proxy
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("read syncz: %w", err)
	}
	return out, nil
}

// State says how one type of one proxy stands: SYNCED (the last response
// was acknowledged), STALE (sent, not yet acknowledged), NACKED (the last
// response was rejected; the proxy runs its previous configuration) or
// NOT SENT.
func State(ts *TypeStatus) string {
	switch {
	case ts == nil || ts.SentNonce == "":
		return "NOT SENT"
	case ts.LastNACK != nil && ts.LastNACK.Nonce == ts.SentNonce:
		return "NACKED"
	case ts.AckedVersion == ts.SentVersion:
		return "SYNCED"
	default:
		return "STALE"
	}
}

// Write prints one line per proxy, sorted by name, at time now.
func Write(w io.Writer, proxies []Proxy, now time.Time) error {
	sort.Slice(proxies, func(i, j int) bool { return proxies[i].ID < proxies[j].ID })
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tCDS\tLDS\tEDS\tRDS\tPROTOCOL\tCONNECTED")
	for _, p := range proxies {
		name, typ := p.ID, ""
		if parts := strings.Split(p.ID, "~"); len(parts) == 4 {
			name, typ = parts[2], parts[0]
		}
		proto := "sotw"
		if p.Delta {
			proto = "delta"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, typ,
			State(p.Types["cds"]), State(p.Types["lds"]), State(p.Types["eds"]), State(p.Types["rds"]),
			proto, now.Sub(p.Connected).Round(time.Second))
	}
	return tw.Flush()
}
