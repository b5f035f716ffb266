package main

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// messages are the spec messages of every Istio kind whose CRD Istio's
// base chart installs (the Istio kinds discovery reads, model.IstioKinds),
// in the order their CRDs are written.
var messages = []protoreflect.FullName{
	"istio.networking.v1alpha3.VirtualService",
	"istio.networking.v1alpha3.DestinationRule",
	"istio.networking.v1alpha3.Gateway",
	"istio.networking.v1alpha3.ServiceEntry",
	"istio.networking.v1alpha3.Sidecar",
	"istio.networking.v1alpha3.WorkloadEntry",
	"istio.security.v1beta1.PeerAuthentication",
	"istio.security.v1beta1.AuthorizationPolicy",
	"istio.security.v1beta1.RequestAuthentication",
	"istio.telemetry.v1alpha1.Telemetry",
	"istio.networking.v1alpha3.EnvoyFilter",
	"istio.networking.v1alpha3.WorkloadGroup",
	"istio.networking.v1beta1.ProxyConfig",
	"istio.extensions.v1alpha1.WasmPlugin",
	"istio.extensions.v1alpha1.TrafficExtension",
}

// defaultStatus is the status message of a kind whose tag is just
// "subresource:status".
const defaultStatus = "istio.meta.v1alpha1.IstioStatus"

// crdKind is one kind's CRD-level settings, read from the +cue-gen tags of
// its message (cueGenTags) with Istio's defaults.
type crdKind struct {
	Message                             protoreflect.MessageDescriptor
	Kind, Group, Plural, Singular, List string
	ShortNames, Categories              []string
	// Versions are sorted by name, as Istio writes them; Storage is the
	// first version of the tag.
	Versions []string
	Storage  string
	Columns  []apiextv1.CustomResourceColumnDefinition
	// Status is the status message, if the kind has a status subresource.
	Status protoreflect.FullName
	// SpecRequired makes spec a required field of the object.
	SpecRequired bool
	// Deprecation, if set, is the replacement that makes every version
	// deprecated.
	Deprecation string
}

// loadKind reads the tags of one message.
func loadKind(src *protoSource, name protoreflect.FullName) (crdKind, error) {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return crdKind{}, fmt.Errorf("find %s: %w", name, err)
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return crdKind{}, fmt.Errorf("%s is not a message", name)
	}
	comment, err := src.comment(md)
	if err != nil {
		return crdKind{}, err
	}
	tags, err := cueGenTags(comment)
	if err != nil {
		return crdKind{}, fmt.Errorf("%s: %w", name, err)
	}
	if tags == nil {
		return crdKind{}, fmt.Errorf("%s has no +cue-gen tags", name)
	}
	k := crdKind{Message: md, Kind: string(md.Name()), Group: tags["groupName"]}
	k.Singular = strings.ToLower(k.Kind)
	k.Plural, k.List = k.Singular+"s", k.Kind+"List"
	if err := k.readTags(tags); err != nil {
		return crdKind{}, fmt.Errorf("%s: %w", name, err)
	}
	return k, nil
}

func (k *crdKind) readTags(tags map[string]string) error {
	if s, ok := tags["scope"]; ok && s != "Namespaced" {
		return fmt.Errorf("scope %q: only Namespaced is supported (as by Istio's generator)", s)
	}
	k.Versions = strings.Split(tags["versions"], ",")
	k.Storage = k.Versions[0]
	if v := tags["version"]; v != "" {
		k.Versions, k.Storage = []string{v}, ""
		if _, ok := tags["storageVersion"]; ok {
			k.Storage = v
		}
	}
	for _, v := range k.Versions {
		if v == "" {
			return fmt.Errorf("no version in tags versions=%q version=%q", tags["versions"], tags["version"])
		}
	}
	sort.Strings(k.Versions)
	res, err := keyValues(tags["resource"])
	if err != nil {
		return err
	}
	for key, v := range res {
		switch key {
		case "categories":
			k.Categories = mergeNames(k.Categories, strings.Split(v, ","))
		case "shortNames":
			k.ShortNames = mergeNames(k.ShortNames, strings.Split(v, ","))
		case "plural":
			k.Plural = v
		case "kind":
			k.Kind = v
		case "singular":
			k.Singular = v
		case "listKind":
			k.List = v
		}
	}
	if pcs, ok := tags["printerColumn"]; ok {
		for _, pc := range strings.Split(pcs, ";;") {
			if pc == "" {
				continue
			}
			kv, err := keyValues(pc)
			if err != nil {
				return err
			}
			k.Columns = append(k.Columns, apiextv1.CustomResourceColumnDefinition{
				Name: kv["name"], Type: kv["type"], JSONPath: kv["JSONPath"], Description: kv["description"],
			})
		}
	}
	if sr, ok := tags["subresource"]; ok {
		name, msg, _ := strings.Cut(sr, "=")
		if name == "status" {
			if msg == "" {
				msg = defaultStatus
			}
			k.Status = protoreflect.FullName(msg)
		}
	}
	k.SpecRequired = tags["spec"] == "required"
	k.Deprecation = tags["deprecationReplacement"]
	return nil
}

func mergeNames(a, b []string) []string {
	for _, n := range b {
		found := false
		for _, m := range a {
			found = found || m == n
		}
		if !found {
			a = append(a, n)
		}
	}
	return a
}
