package status

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"

	"github.com/meshplane/discovery/pkg/model"
)

// Gateway API objects are judged by their translation's Report
// (model.World.GatewayAPIReport): what it did not translate is logged
// once per version of the report and counted in
// discovery_config_unsupported_fields{kind, field} (field: the path
// before the message), what it refused for safety is logged and counted
// in discovery_config_refused{kind}. Their status (conditions, listener
// and parent status) is written by the leader (gatewayapi_status.go) and
// shown in /debug/configz under "translation". Istio configs derived from them (model.Config.Derived)
// are judged like any other but have no object of their own whose status
// could be written.

// gatewayFinding is what the translation did not act on of one Gateway
// API object, and what it refused.
func gatewayFinding(w *model.World, c *model.Config) (f Finding, refused []string, v string) {
	rep := w.GatewayAPIReport(c.Key)
	if rep == nil {
		return Finding{}, nil, version(c)
	}
	seen := map[string]bool{}
	for _, u := range rep.Unsupported {
		field, _, _ := strings.Cut(u, ": ")
		if !seen[field] {
			seen[field] = true
			f.Fields = append(f.Fields, field)
		}
	}
	sort.Strings(f.Fields)
	js, _ := json.Marshal(struct{ U, D []string }{rep.Unsupported, rep.Denied})
	sum := sha256.Sum256(js)
	return f, rep.Denied, version(c) + "/" + hex.EncodeToString(sum[:6])
}

func version0(c *model.Config) string { return version(c) }
