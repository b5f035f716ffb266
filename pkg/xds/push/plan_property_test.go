package push

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/gen"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// TestPushPlanCoversEveryChangedProxy is the planner's property (Changes.For): for
// random Worlds and a random single change, every proxy whose
// configuration, generated from scratch, differs between the World before
// and after is planned a push that covers the difference (a full push,
// or new endpoints of the services whose endpoints are all that changed);
// and generation reusing the previous configuration equals generation
// from scratch. A proxy planned a full push whose configuration did not
// change is an extra push: allowed (the push then sends nothing), counted
// and reported as the planner's efficiency.
var (
	planTrials = flag.Int("plan.trials", 0, "TestPushPlanCoversEveryChangedProxy's number of random Worlds (0: 300, 60 with -short)")
	planTrial  = flag.Int("plan.trial", -1, "run only this trial of TestPushPlanCoversEveryChangedProxy, and log its World and change")
)

func TestPushPlanCoversEveryChangedProxy(t *testing.T) {
	trials := 300
	if testing.Short() {
		trials = 60
	}
	if *planTrials > 0 {
		trials = *planTrials
	}
	g, err := gen.New(gen.DefaultOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	var changed, extra, planned, proxies, changedFirst, extraFirst int
	byKind := map[model.Kind][2]int{} // kind -> {extra, changed}
	for trial := range trials {
		if *planTrial >= 0 && trial != *planTrial {
			continue
		}
		rng := rand.New(rand.NewSource(int64(trial)))
		pw := randomPlanWorld(rng)
		store := model.NewStore(model.StoreOptions{})
		evs, err := decodeVersioned(pw.yaml())
		if err != nil {
			t.Fatalf("trial %d: %v\n%s", trial, err, pw.yaml())
		}
		evs = append(evs, pw.slices()...)
		if _, err := store.Apply(evs...); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		w0 := store.World()
		ps := pw.proxies(t)
		// held is what each proxy holds, scratch the configuration
		// generated from scratch for the same World. A trial makes two
		// changes: the second is planned from what the first left the
		// proxies holding (reused, endpoints-only or not pushed at all, as
		// the server would), so a read lost in reuse shows as a miss.
		held := make([]*gen.ProxyConfig, len(ps))
		scratch := make([]*gen.ProxyConfig, len(ps))
		for i, p := range ps {
			held[i] = generate(t, g, w0, p, nil)
			scratch[i] = held[i]
		}
		for step := range 2 {
			desc, change := pw.change(rng)
			desc = fmt.Sprintf("change %d: %s", step+1, desc)
			if *planTrial >= 0 {
				t.Logf("trial %d: the World\n%s\nthe change: %s", trial, pw.yaml(), desc)
			}
			u, err := store.Apply(change...)
			if err != nil {
				t.Fatalf("trial %d (%s): %v", trial, desc, err)
			}
			if u == nil {
				continue // the same revision again: the Store publishes nothing
			}
			w1 := u.World
			kinds := map[model.Key]model.Op{}
			for _, c := range u.Changes {
				kinds[c.Key] = c.Op
			}
			changes := Split(kinds)
			for i, p := range ps {
				proxies++
				item, _ := changes.For(w1, p, held[i])
				after := generate(t, g, w1, p, nil)
				reused := generate(t, g, w1, p, held[i].Class)
				if d := configDiff(after, reused); d != "" {
					t.Errorf("trial %d (%s), proxy %s: reuse differs from scratch: %s", trial, desc, p.ID, d)
				}
				diff := differing(scratch[i], after)
				if item != nil {
					planned++
				}
				if len(diff) > 0 {
					changed++
				}
				k := firstKind(kinds)
				ek := byKind[k]
				switch {
				case len(diff) > 0 && item == nil:
					t.Errorf("trial %d (%s), proxy %s: configuration changed (%s) and no push was planned", trial, desc, p.ID, strings.Join(clip(diff), ", "))
				case len(diff) > 0 && !item.Full:
					if miss := notCovered(diff, item, after); len(miss) > 0 {
						t.Errorf("trial %d (%s), proxy %s: an endpoints push was planned, but %s changed too", trial, desc, p.ID, strings.Join(clip(miss), ", "))
					}
				case len(diff) == 0 && item != nil && item.Full:
					extra++
					ek[0]++
					if step == 0 {
						extraFirst++
					}
				}
				if step == 0 && len(diff) > 0 {
					changedFirst++
				}
				if len(diff) > 0 {
					ek[1]++
				}
				byKind[k] = ek
				scratch[i] = after
				switch {
				case item == nil:
				case item.Full && item.KeepOwn:
					cls, err := g.Class(w1, p, held[i].Class)
					if err != nil {
						t.Fatal(err)
					}
					held[i] = held[i].WithClass(cls)
				case item.Full:
					held[i] = reused
				default:
					cls, _ := g.UpdateEndpoints(held[i].Class, w1, slices.Collect(maps.Keys(item.EDS)))
					held[i] = held[i].WithClass(cls)
				}
			}
		}
	}
	t.Logf("%d trials, %d proxy checks: %d configurations changed, %d pushes planned, %d full pushes of an unchanged configuration (%.0f%% of the changed)",
		trials, proxies, changed, planned, extra, 100*float64(extra)/float64(max(changed, 1)))
	t.Logf("first changes alone (a World generated from scratch): %d configurations changed, %d extra full pushes", changedFirst, extraFirst)
	for _, k := range slices.Sorted(func(yield func(model.Kind) bool) {
		for k := range byKind {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Logf("  %-24s changed %4d, extra full pushes %4d", k, byKind[k][1], byKind[k][0])
	}
}

// decodeVersioned decodes YAML documents, each object with a
// resourceVersion that changes with its content, as every source gives
// them (the API server; the file source hashes the document): the Store
// and generation tell revisions of an object apart by it.
func decodeVersioned(y string) ([]model.Event, error) {
	evs, err := worldtest.Decode([]byte(y))
	if err != nil {
		return nil, err
	}
	for _, ev := range evs {
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			continue
		}
		js, err := json.Marshal(ev.Object)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(js)
		m.SetResourceVersion(hex.EncodeToString(sum[:8]))
	}
	return evs, nil
}

func generate(t *testing.T, g *gen.Generator, w *model.World, p *model.Proxy, prev *gen.ClassConfig) *gen.ProxyConfig {
	t.Helper()
	cc, err := g.Class(w, p, prev)
	if err != nil {
		t.Fatalf("%s: %v", p.ID, err)
	}
	return g.Proxy(w, p, cc)
}

func firstKind(changes map[model.Key]model.Op) model.Kind {
	var ks []string
	for k := range changes {
		if k.Kind != model.KindEndpointSlice {
			ks = append(ks, string(k.Kind))
		}
	}
	if len(ks) == 0 {
		return model.KindEndpointSlice
	}
	slices.Sort(ks)
	return model.Kind(ks[0])
}

// differing lists type/name of the resources that differ between a and b.
func differing(a, b *gen.ProxyConfig) []string {
	var out []string
	for _, t := range gen.TypeURLs {
		names := map[string]bool{}
		for _, n := range a.Names(t) {
			names[n] = true
		}
		for _, n := range b.Names(t) {
			names[n] = true
		}
		for _, n := range slices.Sorted(func(yield func(string) bool) {
			for n := range names {
				if !yield(n) {
					return
				}
			}
		}) {
			ra, rb := a.Get(t, n), b.Get(t, n)
			if ra == nil || rb == nil || ra.Hash != rb.Hash {
				out = append(out, gen.ShortType(t)+"/"+n)
			}
		}
	}
	return out
}

func configDiff(a, b *gen.ProxyConfig) string {
	return strings.Join(clip(differing(a, b)), ", ")
}

// notCovered lists the differences an endpoints-only push does not send:
// anything but the endpoints of the services it names.
func notCovered(diff []string, item *Plan, after *gen.ProxyConfig) []string {
	covered := map[string]bool{}
	for nn := range item.EDS {
		for _, n := range after.Class.EndpointsOf[nn] {
			covered[gen.ShortType(gen.EndpointType)+"/"+n] = true
		}
	}
	var out []string
	for _, d := range diff {
		if !covered[d] {
			out = append(out, d)
		}
	}
	return out
}

func clip(s []string) []string {
	if len(s) > 4 {
		return append(s[:4:4], fmt.Sprintf("and %d more", len(s)-4))
	}
	return s
}

// planWorld is a small random mesh: services in three namespaces and
// Istio configs over them, described so that a random change can be made
// to one of its objects.
type planWorld struct {
	services []planService
	configs  map[string]string // "Kind ns/name" -> YAML document
}

type planService struct {
	ns, name string
	ip       string
	eps      []string
}

var planNamespaces = []string{"ns-0", "ns-1", "ns-2"}

func randomPlanWorld(rng *rand.Rand) *planWorld {
	pw := &planWorld{configs: map[string]string{}}
	n := 4 + rng.Intn(6)
	for i := range n {
		s := planService{ns: planNamespaces[rng.Intn(len(planNamespaces))], name: fmt.Sprintf("svc-%d", i), ip: fmt.Sprintf("10.96.0.%d", i+1)}
		for j := range 1 + rng.Intn(3) {
			s.eps = append(s.eps, fmt.Sprintf("10.1.%d.%d", i, j+1))
		}
		pw.services = append(pw.services, s)
	}
	for range rng.Intn(5) {
		pw.addConfig(rng)
	}
	return pw
}

func (pw *planWorld) svc(rng *rand.Rand) planService { return pw.services[rng.Intn(len(pw.services))] }

func (s planService) host() string { return s.name + "." + s.ns + ".svc.cluster.local" }

// config makes a random Istio config; its key names it.
func (pw *planWorld) config(rng *rand.Rand) (key, doc string) {
	ns := planNamespaces[rng.Intn(len(planNamespaces))]
	name := fmt.Sprintf("c-%d", rng.Intn(4))
	exportTo := []string{"", `  exportTo: ["."]` + "\n", `  exportTo: ["*"]` + "\n"}[rng.Intn(3)]
	a, b := pw.svc(rng), pw.svc(rng)
	switch rng.Intn(14) {
	case 0, 1:
		gw := ""
		if rng.Intn(3) == 0 {
			gw = "  gateways: [ns-0/gw, mesh]\n"
		}
		return "VirtualService " + ns + "/" + name, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: %s, namespace: %s}
spec:
  hosts: [%s]
%s%s  http:
  - match: [{uri: {prefix: /%d}}]
    route:
    - destination: {host: %s}
      weight: %d
    - destination: {host: %s, subset: v1}
      weight: %d
    timeout: %ds
`, name, ns, a.host(), exportTo, gw, rng.Intn(3), a.host(), 50, b.host(), 50, 1+rng.Intn(5))
	case 2:
		return "DestinationRule " + ns + "/" + name, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: %s, namespace: %s}
spec:
  host: %s
%s  trafficPolicy:
    connectionPool: {tcp: {maxConnections: %d}}
    tls: {mode: %s}
  subsets:
  - name: v1
    labels: {version: v1}
`, name, ns, a.host(), exportTo, 1+rng.Intn(100), []string{"ISTIO_MUTUAL", "DISABLE", "SIMPLE"}[rng.Intn(3)])
	case 3:
		return "Sidecar " + ns + "/default", fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: %s}
spec:
  egress:
  - hosts: ["./*", "%s/*"]
  outboundTrafficPolicy: {mode: %s}
`, ns, planNamespaces[rng.Intn(len(planNamespaces))], []string{"ALLOW_ANY", "REGISTRY_ONLY"}[rng.Intn(2)])
	case 4:
		return "AuthorizationPolicy " + ns + "/" + name, fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: %s, namespace: %s}
spec:
  selector: {matchLabels: {app: %s}}
  action: %s
  rules:
  - from: [{source: {namespaces: [%s]}}]
`, name, ns, a.name, []string{"ALLOW", "DENY"}[rng.Intn(2)], planNamespaces[rng.Intn(len(planNamespaces))])
	case 5:
		return "PeerAuthentication " + ns + "/" + name, fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: %s, namespace: %s}
spec:
  mtls: {mode: %s}
`, name, ns, []string{"STRICT", "PERMISSIVE", "DISABLE"}[rng.Intn(3)])
	case 7:
		return "Gateway ns-0/gw", fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: ns-0}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: http, protocol: HTTP}
    hosts: ["%s/*"]
`, []int{80, 8080}[rng.Intn(2)], []string{"*", "ns-1", "ns-2"}[rng.Intn(3)])
	case 8:
		return "Telemetry " + ns + "/" + name, fmt.Sprintf(`apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: %s, namespace: %s}
spec:
  accessLogging: [{providers: [{name: envoy}], disabled: %t}]
`, name, ns, rng.Intn(2) == 0)
	case 9:
		return "RequestAuthentication " + ns + "/" + name, fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: %s, namespace: %s}
spec:
  selector: {matchLabels: {app: %s}}
  jwtRules: [{issuer: "https://issuer-%d.example", jwksUri: "https://issuer.example/jwks"}]
`, name, ns, a.name, rng.Intn(3))
	case 10:
		return "ProxyConfig " + ns + "/" + name, fmt.Sprintf(`apiVersion: networking.istio.io/v1beta1
kind: ProxyConfig
metadata: {name: %s, namespace: %s}
spec:
  concurrency: %d
`, name, ns, 1+rng.Intn(4))
	case 11:
		return "WorkloadGroup " + ns + "/" + name, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: %s, namespace: %s}
spec:
  metadata: {labels: {app: %s}}
  template: {serviceAccount: sa-%d}
`, name, ns, a.name, rng.Intn(3))
	case 12:
		// tcp and tls routes: a port's listener reads them.
		return "VirtualService " + ns + "/" + name, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: %s, namespace: %s}
spec:
  hosts: [%s]
%s  tcp:
  - match: [{port: 9000}]
    route: [{destination: {host: %s, port: {number: 9000}}}]
  tls:
  - match: [{port: 9000, sniHosts: [%s]}]
    route: [{destination: {host: %s, port: {number: %d}}}]
`, name, ns, a.host(), exportTo, b.host(), a.host(), b.host(), []int{9000, 80}[rng.Intn(2)])
	case 13:
		// An alias: its names join the virtual hosts of the service it names.
		return "Service " + ns + "/alias-" + name, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: alias-%s, namespace: %s}
spec: {type: ExternalName, externalName: %s}
`, name, ns, a.host())
	default:
		return "ServiceEntry " + ns + "/" + name, fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: %s, namespace: %s}
spec:
  hosts: [%s.example.com]
%s  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: %d, name: http, protocol: HTTP}]
`, name, ns, name, exportTo, []int{80, 443, 8080}[rng.Intn(3)])
	}
}

func (pw *planWorld) addConfig(rng *rand.Rand) {
	k, d := pw.config(rng)
	pw.configs[k] = d
}

func (pw *planWorld) yaml() string {
	var b strings.Builder
	b.WriteString(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: ns-0}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*/*"]
`)
	for _, s := range pw.services {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: %s, namespace: %s}
spec:
  clusterIP: %s
  selector: {app: %s}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: grpc, port: 7070}
  - {name: tcp, port: 9000}
`, s.name, s.ns, s.ip, s.name)
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range pw.configs {
			if !yield(k) {
				return
			}
		}
	}) {
		b.WriteString("---\n" + pw.configs[k])
	}
	return b.String()
}

func (pw *planWorld) slices() []model.Event {
	var out []model.Event
	for _, s := range pw.services {
		out = append(out, worldtest.SliceWithPorts(s.ns, s.name, map[string]int32{"http": 8080, "grpc": 7070, "tcp": 9000}, s.eps...))
	}
	return out
}

// proxies are a sidecar of the first service of each namespace that has
// one, and the ingress gateway in ns-0.
func (pw *planWorld) proxies(t *testing.T) []*model.Proxy {
	t.Helper()
	var out []*model.Proxy
	seen := map[string]bool{}
	for _, s := range pw.services {
		if seen[s.ns] {
			continue
		}
		seen[s.ns] = true
		out = append(out, planProxy(t, "sidecar", s.eps[0], s.name+"-0", s.ns, map[string]any{"app": s.name, "version": "v1"}))
	}
	out = append(out, planProxy(t, "router", "10.2.0.1", "gw-0", "ns-0", map[string]any{"istio": "ingressgateway"}))
	return out
}

func planProxy(t *testing.T, typ, ip, pod, ns string, labels map[string]any) *model.Proxy {
	t.Helper()
	p, err := model.ParseProxy(typ+"~"+ip+"~"+pod+"."+ns+"~"+ns+".svc.cluster.local",
		map[string]any{model.MetaIstioVersion: "1.32.0", model.MetaLabels: labels, "NAMESPACE": ns})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// change makes one random change: a config added, edited or deleted, a
// service's endpoints or ports changed, a service added or removed.
func (pw *planWorld) change(rng *rand.Rand) (string, []model.Event) {
	decode := func(doc string) []model.Event {
		evs, err := decodeVersioned(doc)
		if err != nil {
			panic(err)
		}
		return evs
	}
	switch r := rng.Intn(10); {
	case r < 4:
		k, d := pw.config(rng)
		return "upsert " + k, decode(d)
	case r < 6 && len(pw.configs) > 0:
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range pw.configs {
				if !yield(k) {
					return
				}
			}
		})
		k := keys[rng.Intn(len(keys))]
		evs := decode(pw.configs[k])
		for i := range evs {
			evs[i].Op, evs[i].Object = model.OpDelete, nil
		}
		return "delete " + k, evs
	case r < 8:
		s := pw.svc(rng)
		eps := append(slices.Clone(s.eps), fmt.Sprintf("10.3.0.%d", 1+rng.Intn(200)))
		if rng.Intn(2) == 0 && len(s.eps) > 1 {
			eps = s.eps[1:]
		}
		return "endpoints of " + s.ns + "/" + s.name, []model.Event{worldtest.SliceWithPorts(s.ns, s.name, map[string]int32{"http": 8080, "grpc": 7070, "tcp": 9000}, eps...)}
	case r < 9:
		s := pw.svc(rng)
		return "ports of " + s.ns + "/" + s.name, decode(fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s, namespace: %s}
spec:
  clusterIP: %s
  selector: {app: %s}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: http-alt, port: %d}
`, s.name, s.ns, s.ip, s.name, 8000+rng.Intn(100)))
	default:
		ns := planNamespaces[rng.Intn(len(planNamespaces))]
		name := fmt.Sprintf("new-%d", rng.Intn(100))
		return "add service " + ns + "/" + name, append(decode(fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s, namespace: %s}
spec:
  clusterIP: 10.96.1.%d
  ports:
  - {name: http, port: 80}
`, name, ns, 1+rng.Intn(200))), worldtest.SliceWithPorts(ns, name, map[string]int32{"http": 80}, "10.4.0.1"))
	}
}
