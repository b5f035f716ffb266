package istiovalidate

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	istiomesh "istio.io/istio/pkg/config/mesh"

	"github.com/meshplane/discovery/pkg/mesh"
)

// meshCorpus are MeshConfigs as users write them: the fields Istio's docs
// and charts set, Istio's merge rules (nested replacement, defaultConfig
// over the default ProxyConfig, providers by name, aliases), Go durations,
// unknown fields, and values Istio refuses.
var meshCorpus = map[string]string{
	"empty":            "",
	"istio chart":      "trustDomain: cluster.local\nrootNamespace: istio-system\ndefaultProviders:\n  metrics:\n  - prometheus\ndefaultConfig:\n  discoveryAddress: istiod.istio-system.svc:15012\n  tracing:\n    zipkin:\n      address: zipkin.istio-system:9411\nenablePrometheusMerge: true\n",
	"access log":       "accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: '{\"code\": \"%RESPONSE_CODE%\"}'\n",
	"registry only":    "outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n",
	"empty policy":     "outboundTrafficPolicy: {}\n",
	"go durations":     "connectTimeout: 3m\nprotocolDetectionTimeout: 500ms\ndnsRefreshRate: 1m30s\n",
	"locality":         "localityLbSetting:\n  failover:\n  - from: us-east\n    to: us-west\n",
	"proxy metadata":   "defaultConfig:\n  proxyMetadata:\n    ISTIO_META_DNS_CAPTURE: \"true\"\n  holdApplicationUntilProxyStarts: true\n",
	"providers":        "extensionProviders:\n- name: envoy\n  envoyFileAccessLog:\n    path: /dev/stderr\n- name: otel\n  envoyOtelAls:\n    service: otel.observability.svc.cluster.local\n    port: 4317\n- name: zipkin\n  zipkin:\n    service: zipkin.istio-system.svc.cluster.local\n    port: 9411\n",
	"aliases":          "trustDomain: example.org\ntrustDomainAliases: [old.example, a.example, old.example]\n",
	"auto mtls off":    "enableAutoMtls: false\nenableTracing: false\n",
	"export defaults":  "defaultServiceExportTo: [\".\"]\ndefaultVirtualServiceExportTo: [\".\"]\ndefaultDestinationRuleExportTo: [\"*\"]\n",
	"h2 and inbound":   "h2UpgradePolicy: UPGRADE\ninboundTrafficPolicy:\n  mode: LOCALHOST\n",
	"unknown field":    "notAField: 1\nrootNamespace: mesh-root\ndefaultConfig:\n  alsoNot: x\n",
	"snake case":       "root_namespace: other\naccess_log_file: /dev/stdout\n",
	"zero timeout":     "connectTimeout: 0s\n",
	"long timeout":     "connectTimeout: 2h\n",
	"bad duration":     "connectTimeout: soon\n",
	"bad enum":         "outboundTrafficPolicy:\n  mode: SOMETIMES\n",
	"bad address":      "defaultConfig:\n  discoveryAddress: istiod.istio-system.svc\n",
	"fractional drain": "defaultConfig:\n  drainDuration: 1500ms\n",
	"bad trust domain": "trustDomain: Not_Valid\n",
	"bad alias":        "trustDomainAliases: [ok.example, -bad]\n",
	"weights":          "localityLbSetting:\n  distribute:\n  - from: a/*\n    to:\n      b/*: 50\n",
	"listen port":      "proxyListenPort: 70000\n",
	"not an object":    "- a\n",
	"wrong type":       "rootNamespace: [a]\n",
	"null":             "~\n",
}

// TestMeshConfigAsIstioReadsIt reads every MeshConfig of the corpus with
// Istio's own mesh.ApplyMeshConfigDefaults and with discovery's
// mesh.Parse: the same verdict, and for those accepted the same
// MeshConfig, field by field.
func TestMeshConfigAsIstioReadsIt(t *testing.T) {
	for name, text := range meshCorpus {
		t.Run(name, func(t *testing.T) {
			want, ierr := istiomesh.ApplyMeshConfigDefaults(text)
			got, derr := mesh.Parse(text)
			if (ierr == nil) != (derr == nil) {
				t.Fatalf("verdicts differ: Istio %v, discovery %v", ierr, derr)
			}
			if ierr != nil {
				t.Logf("both refuse: Istio %q; discovery %q", ierr, derr)
				return
			}
			if !proto.Equal(want, got.Proto()) {
				t.Errorf("MeshConfigs differ:\nIstio     %s\ndiscovery %s", canonical(t, want), canonical(t, got.Proto()))
			}
		})
	}
}

func canonical(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	c, _ := json.Marshal(v)
	return string(c)
}

// The defaults themselves, field by field.
func TestMeshConfigDefaultsAreIstios(t *testing.T) {
	if !proto.Equal(istiomesh.DefaultMeshConfig(), mesh.DefaultMeshConfig()) {
		t.Errorf("default MeshConfig differs:\nIstio     %s\ndiscovery %s", canonical(t, istiomesh.DefaultMeshConfig()), canonical(t, mesh.DefaultMeshConfig()))
	}
	if !reflect.DeepEqual(strings.Split(canonical(t, istiomesh.DefaultProxyConfig()), ","), strings.Split(canonical(t, mesh.DefaultProxyConfig()), ",")) {
		t.Errorf("default ProxyConfig differs:\nIstio     %s\ndiscovery %s", canonical(t, istiomesh.DefaultProxyConfig()), canonical(t, mesh.DefaultProxyConfig()))
	}
}
