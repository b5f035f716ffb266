package gen

import "github.com/meshplane/discovery/pkg/model"

// ReadsKind reports whether generation reads objects of kind at all. For a
// kind it reads, UnsupportedFields names the fields it ignores; an Istio
// kind it does not read (WasmPlugin, ProxyConfig, ... today) has no effect on any
// proxy, whatever it says.
func ReadsKind(kind model.Kind) bool {
	_, ok := supportedFields[kind]
	return ok
}
