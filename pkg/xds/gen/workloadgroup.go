package gen

// workloadGroupFields are the WorkloadGroup fields that have an effect:
// pkg/autoregister makes a proxy's WorkloadEntry from the group's
// metadata and template (the template's fields are then the
// WorkloadEntry's, so those generation ignores in an entry are reported
// here too; the template's address is always replaced by the proxy's).
// probe has the effect it has with istiod: none in the control plane, the
// agent reads it from the configuration istioctl generates for the VM
// (readinessProbe), and its node's PROXY_CONFIG then turns the entry's
// health checks on.
var workloadGroupFields = newFieldSet(
	"metadata", "template.ports", "template.labels", "template.locality", "template.weight",
	"template.serviceAccount", "probe",
)
