package status

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshplane/discovery/pkg/config/file"
	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/monitor"
)

// In file mode nothing writes status: /debug/configz is where what
// discovery ignores of each config shows, read from YAML as the config
// directory reads it.
func TestConfigzShowsWhatIsIgnoredInFileMode(t *testing.T) {
	const configs = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - route: [{destination: {host: reviews}}]
    retries: {attempts: 2, retryRemoteLocalities: true}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings, namespace: shop}
spec:
  hosts: [ratings]
  http:
  - route: [{destination: {host: ratings}}]
---
apiVersion: extensions.istio.io/v1alpha1
kind: TrafficExtension
metadata: {name: jwt, namespace: shop}
spec: {wasm: {url: "oci://ghcr.io/example/plugin:1"}}
`
	objs, errs := file.Parse("mesh.yaml", []byte(configs))
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	store := model.NewStore(model.StoreOptions{})
	for _, o := range objs {
		if _, err := store.Apply(model.Event{Op: model.OpUpsert, Key: o.Key, Object: o.Object}); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	monitor.ConfigzHandler(store.World, ConfigzNote).ServeHTTP(rec, httptest.NewRequest("GET", "/debug/configz", nil))
	var got []struct {
		Kind        string `json:"kind"`
		Metadata    struct{ Name string }
		Unsupported *struct {
			Kind    bool     `json:"kind"`
			Fields  []string `json:"fields"`
			Message string   `json:"message"`
		} `json:"unsupported"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	seen := map[string]bool{}
	for _, c := range got {
		seen[c.Metadata.Name] = true
		u := c.Unsupported
		switch c.Metadata.Name {
		case "reviews":
			if u == nil || u.Kind || len(u.Fields) != 1 || u.Fields[0] != ignoredField || u.Message != (Finding{Fields: u.Fields}).Message(model.KindVirtualService) {
				t.Errorf("reviews: unsupported = %+v", u)
			}
		case "ratings":
			if u != nil {
				t.Errorf("ratings sets nothing ignored, yet unsupported = %+v", u)
			}
		case "jwt":
			if u == nil || !u.Kind || !strings.HasPrefix(u.Message, "TrafficExtension is not supported by discovery: its extensions") {
				t.Errorf("jwt: unsupported = %+v", u)
			}
		}
	}
	if len(seen) != 3 {
		t.Errorf("configz lists %v, want the three configs: %s", seen, rec.Body)
	}
}
