package main

import (
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// crdKind describes one Istio kind's CustomResourceDefinition: everything
// that is not in the protobuf descriptor (names, versions, columns).
type crdKind struct {
	Kind       string
	Group      string
	Plural     string
	ShortNames []string
	// Message is the full protobuf name of the spec message.
	Message protoName
	// Versions are served in this order; Storage is the one stored.
	Versions []string
	Storage  string
	Columns  []apiextv1.CustomResourceColumnDefinition
}

type protoName string

// Istio serves networking.istio.io kinds as v1alpha3, v1beta1 and v1 and
// security.istio.io kinds as v1beta1 and v1, with the same schema in every
// version (no conversion). Both store v1 here.
var (
	networkingVersions = []string{"v1alpha3", "v1beta1", "v1"}
	securityVersions   = []string{"v1beta1", "v1"}
)

const (
	groupNetworking = "networking.istio.io"
	groupSecurity   = "security.istio.io"
)

func column(name, typ, path, desc string) apiextv1.CustomResourceColumnDefinition {
	return apiextv1.CustomResourceColumnDefinition{Name: name, Type: typ, JSONPath: path, Description: desc}
}

var ageColumn = column("Age", "date", ".metadata.creationTimestamp",
	"CreationTimestamp is a timestamp representing the server time when this object was created.")

// kinds lists every Istio kind discovery reads (model.IstioKinds), with the
// names, short names and printer columns Istio gives them.
var kinds = []crdKind{
	{
		Kind: "VirtualService", Group: groupNetworking, Plural: "virtualservices", ShortNames: []string{"vs"},
		Message: "istio.networking.v1alpha3.VirtualService", Versions: networkingVersions, Storage: "v1",
		Columns: []apiextv1.CustomResourceColumnDefinition{
			column("Gateways", "string", ".spec.gateways", "The names of gateways and sidecars that should apply these routes"),
			column("Hosts", "string", ".spec.hosts", "The destination hosts to which traffic is being sent"),
			ageColumn,
		},
	},
	{
		Kind: "DestinationRule", Group: groupNetworking, Plural: "destinationrules", ShortNames: []string{"dr"},
		Message: "istio.networking.v1alpha3.DestinationRule", Versions: networkingVersions, Storage: "v1",
		Columns: []apiextv1.CustomResourceColumnDefinition{
			column("Host", "string", ".spec.host", "The name of a service from the service registry"),
			ageColumn,
		},
	},
	{
		Kind: "Gateway", Group: groupNetworking, Plural: "gateways", ShortNames: []string{"gw"},
		Message: "istio.networking.v1alpha3.Gateway", Versions: networkingVersions, Storage: "v1",
	},
	{
		Kind: "ServiceEntry", Group: groupNetworking, Plural: "serviceentries", ShortNames: []string{"se"},
		Message: "istio.networking.v1alpha3.ServiceEntry", Versions: networkingVersions, Storage: "v1",
		Columns: []apiextv1.CustomResourceColumnDefinition{
			column("Hosts", "string", ".spec.hosts", "The hosts associated with the ServiceEntry"),
			column("Location", "string", ".spec.location", "Whether the service is external to the mesh or part of the mesh (MESH_EXTERNAL or MESH_INTERNAL)"),
			column("Resolution", "string", ".spec.resolution", "Service resolution mode for the hosts (NONE, STATIC, or DNS)"),
			ageColumn,
		},
	},
	{
		Kind: "Sidecar", Group: groupNetworking, Plural: "sidecars",
		Message: "istio.networking.v1alpha3.Sidecar", Versions: networkingVersions, Storage: "v1",
	},
	{
		Kind: "WorkloadEntry", Group: groupNetworking, Plural: "workloadentries", ShortNames: []string{"we"},
		Message: "istio.networking.v1alpha3.WorkloadEntry", Versions: networkingVersions, Storage: "v1",
		Columns: []apiextv1.CustomResourceColumnDefinition{
			ageColumn,
			column("Address", "string", ".spec.address", "Address associated with the network endpoint."),
		},
	},
	{
		Kind: "PeerAuthentication", Group: groupSecurity, Plural: "peerauthentications", ShortNames: []string{"pa"},
		Message: "istio.security.v1beta1.PeerAuthentication", Versions: securityVersions, Storage: "v1",
		Columns: []apiextv1.CustomResourceColumnDefinition{
			column("Mode", "string", ".spec.mtls.mode", "Defines the mTLS mode used for peer authentication."),
			ageColumn,
		},
	},
	{
		Kind: "AuthorizationPolicy", Group: groupSecurity, Plural: "authorizationpolicies", ShortNames: []string{"ap"},
		Message: "istio.security.v1beta1.AuthorizationPolicy", Versions: securityVersions, Storage: "v1",
		Columns: []apiextv1.CustomResourceColumnDefinition{
			column("Action", "string", ".spec.action", "The operation to take."),
			ageColumn,
		},
	},
	{
		Kind: "RequestAuthentication", Group: groupSecurity, Plural: "requestauthentications", ShortNames: []string{"ra"},
		Message: "istio.security.v1beta1.RequestAuthentication", Versions: securityVersions, Storage: "v1",
	},
}

// categories are the kubectl categories of a group's kinds
// (kubectl get istio-io).
func categories(group string) []string {
	if group == groupSecurity {
		return []string{"istio-io", "security-istio-io"}
	}
	return []string{"istio-io", "networking-istio-io"}
}
