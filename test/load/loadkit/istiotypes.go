package loadkit

// Typed configs of Istio's proxy extensions that discovery sends, as
// istiod does: the metadata exchange filters carry a udpa TypedStruct,
// istio.stats its stats.PluginConfig. Linking their Go types lets the
// simulated proxies decode and validate them as Istio's Envoy would.
import (
	_ "github.com/cncf/xds/go/udpa/type/v1"
	_ "istio.io/api/envoy/extensions/stats"
)
