package server

import (
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/push"
)

// RegisterDebug serves /debug/syncz, /debug/config_dump?proxyID=ID and
// /debug/push_status on mux, and answers Istio's generic debug type
// (istio.io/debug) with mux's pages.
func (s *Server) RegisterDebug(mux *http.ServeMux) {
	s.debugMux = mux
	mux.HandleFunc("/debug/syncz", s.syncz)
	mux.HandleFunc("/debug/config_dump", s.configDump)
	mux.HandleFunc("/debug/push_status", s.pushStatus)
}

// SyncStatus is one proxy's row in /debug/syncz: istiod's fields (those
// of its xds.SyncStatus, which istioctl version and Kiali read), then
// discovery's own.
type SyncStatus struct {
	// ProxyID is <pod>.<namespace>, as istiod names proxies.
	ProxyID      string `json:"proxy"`
	ProxyType    string `json:"proxy_type,omitempty"`
	ClusterID    string `json:"cluster_id,omitempty"`
	IstioVersion string `json:"istio_version,omitempty"`
	// The nonce last sent and last acknowledged, by type.
	ClusterSent   string `json:"cluster_sent,omitempty"`
	ClusterAcked  string `json:"cluster_acked,omitempty"`
	ListenerSent  string `json:"listener_sent,omitempty"`
	ListenerAcked string `json:"listener_acked,omitempty"`
	RouteSent     string `json:"route_sent,omitempty"`
	RouteAcked    string `json:"route_acked,omitempty"`
	EndpointSent  string `json:"endpoint_sent,omitempty"`
	EndpointAcked string `json:"endpoint_acked,omitempty"`
	// Resources is the same for every type, by type URL.
	Resources map[string]ResourceStatus `json:"resources,omitempty"`

	// Node is the full node ID.
	Node      string                 `json:"node"`
	Class     string                 `json:"class"`
	Delta     bool                   `json:"delta"`
	Connected time.Time              `json:"connected"`
	Types     map[string]*typeStatus `json:"types"`
}

// ResourceStatus is one type of one proxy in istiod's shape: the nonces
// last sent and acknowledged, when it was sent, and the proxy's last
// rejection of it.
type ResourceStatus struct {
	Sent      string    `json:"sent,omitempty"`
	Acked     string    `json:"acked,omitempty"`
	SentTime  time.Time `json:"sentTime,omitzero"`
	LastError string    `json:"lastError,omitempty"`
}

// Syncz returns every identified stream's status, sorted by proxy.
func (s *Server) Syncz() []SyncStatus {
	out := []SyncStatus{} // an empty list, not null, when no proxy is connected
	s.conns.Range(func(_, v any) bool {
		c := v.(*conn)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.proxy == nil {
			return true
		}
		out = append(out, c.syncStatus())
		return true
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].ProxyID != out[j].ProxyID {
			return out[i].ProxyID < out[j].ProxyID
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// syncStatus is c's row. Called with c.mu held.
func (c *conn) syncStatus() SyncStatus {
	p := c.proxy
	class := p.Class()
	if c.cfg != nil {
		class = c.cfg.Class.Class // with its workload-dependent part (gen.ClassKey)
	}
	row := SyncStatus{
		ProxyID: istioProxyID(p), ProxyType: string(p.Type), ClusterID: p.Metadata.ClusterID, IstioVersion: p.Metadata.IstioVersion,
		Node: p.ID, Class: class, Delta: c.key.delta, Connected: c.connected,
		Types: map[string]*typeStatus{}, Resources: map[string]ResourceStatus{},
	}
	for t, st := range c.statuses() {
		cp := *st
		row.Types[gen.ShortType(t)] = &cp
		rs := ResourceStatus{Sent: st.SentNonce, Acked: st.AckedNonce, SentTime: st.Sent}
		if st.LastNACK != nil && st.LastNACK.Nonce == st.SentNonce {
			rs.LastError = st.LastNACK.Message
		}
		row.Resources[t] = rs
		switch t {
		case gen.ClusterType:
			row.ClusterSent, row.ClusterAcked = st.SentNonce, st.AckedNonce
		case gen.ListenerType:
			row.ListenerSent, row.ListenerAcked = st.SentNonce, st.AckedNonce
		case gen.RouteType:
			row.RouteSent, row.RouteAcked = st.SentNonce, st.AckedNonce
		case gen.EndpointType:
			row.EndpointSent, row.EndpointAcked = st.SentNonce, st.AckedNonce
		}
	}
	return row
}

func (s *Server) syncz(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.Syncz()) }

// configDump answers with what the proxy is sent, in the shape of Envoy's
// /config_dump. proxyID is the proxy's full node ID or, as istiod takes
// it, <pod>.<namespace>.
func (s *Server) configDump(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("proxyID")
	if id == "" {
		http.Error(w, "missing proxyID query parameter", http.StatusBadRequest)
		return
	}
	found := s.findProxy(id, "")
	if found == nil {
		http.Error(w, "no connected proxy with that ID", http.StatusNotFound)
		return
	}
	dump, err := found.configDump()
	if err != nil {
		s.log.Error("config dump", "proxy", model.Clip(id), "error", err)
		http.Error(w, "cannot render the configuration", http.StatusInternalServerError)
		return
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(dump)
	if err != nil {
		http.Error(w, "cannot render the configuration", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (c *conn) configDump() (*adminv3.ConfigDump, error) {
	c.mu.Lock()
	cfg := c.cfg
	versions := map[string]string{}
	for t, st := range c.statuses() {
		versions[t] = st.SentVersion
	}
	c.mu.Unlock()
	each := func(t string, fn func(name string, m *anypb.Any)) {
		for _, n := range cfg.Names(t) {
			fn(n, cfg.Get(t, n).Wire())
		}
	}
	clusters := &adminv3.ClustersConfigDump{VersionInfo: versions[gen.ClusterType]}
	each(gen.ClusterType, func(_ string, a *anypb.Any) {
		clusters.DynamicActiveClusters = append(clusters.DynamicActiveClusters, &adminv3.ClustersConfigDump_DynamicCluster{VersionInfo: versions[gen.ClusterType], Cluster: a})
	})
	listeners := &adminv3.ListenersConfigDump{VersionInfo: versions[gen.ListenerType]}
	each(gen.ListenerType, func(n string, a *anypb.Any) {
		listeners.DynamicListeners = append(listeners.DynamicListeners, &adminv3.ListenersConfigDump_DynamicListener{
			Name: n, ActiveState: &adminv3.ListenersConfigDump_DynamicListenerState{VersionInfo: versions[gen.ListenerType], Listener: a},
		})
	})
	routes := &adminv3.RoutesConfigDump{}
	each(gen.RouteType, func(_ string, a *anypb.Any) {
		routes.DynamicRouteConfigs = append(routes.DynamicRouteConfigs, &adminv3.RoutesConfigDump_DynamicRouteConfig{VersionInfo: versions[gen.RouteType], RouteConfig: a})
	})
	endpoints := &adminv3.EndpointsConfigDump{}
	each(gen.EndpointType, func(_ string, a *anypb.Any) {
		endpoints.DynamicEndpointConfigs = append(endpoints.DynamicEndpointConfigs, &adminv3.EndpointsConfigDump_DynamicEndpointConfig{VersionInfo: versions[gen.EndpointType], EndpointConfig: a})
	})
	out := &adminv3.ConfigDump{}
	for _, m := range []proto.Message{clusters, listeners, routes, endpoints} {
		a, err := anypb.New(m)
		if err != nil {
			return nil, err
		}
		out.Configs = append(out.Configs, a)
	}
	secrets, err := c.secretsDump() // private keys redacted
	if err != nil {
		return nil, err
	}
	if secrets != nil {
		out.Configs = append(out.Configs, secrets)
	}
	return out, nil
}

// record is one push in /debug/push_status.
type record struct {
	Version  uint64         `json:"world"`
	Start    time.Time      `json:"start"`
	Reasons  map[string]int `json:"reasons"`
	Full     int            `json:"fullPushes"`
	EDS      int            `json:"edsPushes"`
	Duration string         `json:"duration,omitempty"`
	Waves    []WaveReport   `json:"waves,omitempty"`

	mu      sync.Mutex
	pending atomic.Int64
	sealed  atomic.Bool
}

func (r *record) enqueue(full bool) {
	r.mu.Lock()
	if full {
		r.Full++
	} else {
		r.EDS++
	}
	r.mu.Unlock()
	r.pending.Add(1)
}

// enqueued marks the end of enqueueing; the push is done when every
// proxy has been handled.
func (r *record) enqueued() {
	r.sealed.Store(true)
	if r.pending.Load() == 0 {
		r.finish()
	}
}

// wave records the outcome of a push wave (canary.go).
func (r *record) wave(w WaveReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.Waves {
		if r.Waves[i].Class == w.Class {
			r.Waves[i] = w
			return
		}
	}
	if len(r.Waves) < 100 {
		r.Waves = append(r.Waves, w)
	}
}

func (r *record) done() {
	if r.pending.Add(-1) == 0 && r.sealed.Load() {
		r.finish()
	}
}

func (r *record) finish() {
	r.mu.Lock()
	if r.Duration == "" {
		r.Duration = time.Since(r.Start).Round(time.Microsecond).String()
	}
	r.mu.Unlock()
}

// history keeps the last pushes.
type history struct {
	mu   sync.Mutex
	size int
	recs []*record
}

func newHistory(size int) *history { return &history{size: size} }

func (h *history) begin(req *push.Request, reasons map[string]int) *record {
	r := &record{Version: req.World.Version, Start: time.Now(), Reasons: reasons}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	if len(h.recs) > h.size {
		h.recs = h.recs[len(h.recs)-h.size:]
	}
	return r
}

// records returns the remembered pushes, oldest first.
func (h *history) records() []*record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*record{}, h.recs...)
}

func (s *Server) pushStatus(w http.ResponseWriter, _ *http.Request) {
	recs := s.history.records()
	type row struct {
		Version  uint64         `json:"world"`
		Start    time.Time      `json:"start"`
		Reasons  map[string]int `json:"reasons"`
		Full     int            `json:"fullPushes"`
		EDS      int            `json:"edsPushes"`
		Duration string         `json:"duration,omitempty"`
		Waves    []WaveReport   `json:"waves,omitempty"`
	}
	out := make([]row, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		r.mu.Lock()
		out = append(out, row{r.Version, r.Start, r.Reasons, r.Full, r.EDS, r.Duration, append([]WaveReport(nil), r.Waves...)})
		r.mu.Unlock()
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
