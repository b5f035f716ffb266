package server

import (
	"testing"

	"github.com/meshplane/discovery/pkg/model"
	"github.com/meshplane/discovery/pkg/xds/internal/worldtest"
)

// A fetched key set (pkg/jwks) matters to the proxies whose
// RequestAuthentication names it, and to no other: they inline it.
func TestJWKSChangeMattersWhereAPolicyNamesIt(t *testing.T) {
	store := meshStore(t, 4)
	evs, err := worldtest.Decode([]byte(`
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: ns-0}
spec:
  selector: {matchLabels: {app: a}}
  jwtRules: [{issuer: "https://issuer.example", jwksUri: "https://issuer.example/keys"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, store, evs...)
	apply(t, store, model.Event{
		Key:    model.JWKSKey("https://issuer.example", "https://issuer.example/keys"),
		Object: &model.JWKS{Issuer: "https://issuer.example", URI: "https://issuer.example/keys", Keys: `{"keys":[]}`},
	})
	w := store.World()
	k := model.JWKSKey("https://issuer.example", "https://issuer.example/keys")
	for name, tc := range map[string]struct {
		ns, app, generator string
		want               bool
	}{
		"a selected sidecar":                     {ns: "ns-0", app: "a", want: true},
		"a sidecar the selector does not select": {ns: "ns-0", app: "b"},
		"a sidecar of another namespace":         {ns: "ns-1", app: "a"},
		"a proxyless gRPC server (no jwt_authn)": {ns: "ns-0", app: "a", generator: "grpc"},
	} {
		t.Run(name, func(t *testing.T) {
			meta := map[string]any{"LABELS": map[string]any{"app": tc.app}}
			if tc.generator != "" {
				meta["GENERATOR"] = tc.generator
			}
			p, err := model.ParseProxy("sidecar~10.0.0.1~x."+tc.ns+"~"+tc.ns+".svc.cluster.local", meta)
			if err != nil {
				t.Fatal(err)
			}
			if got := matters(t, k, p, w); got != tc.want {
				t.Errorf("matters %v, want %v", got, tc.want)
			}
		})
	}
}
