package inject

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecide(t *testing.T) {
	type pod struct {
		labels, annotations map[string]string
		hostNetwork         bool
		namespace           string
	}
	enabled := map[string]string{"istio-injection": "enabled"}
	cases := map[string]struct {
		pod      pod
		nsLabels map[string]string
		revision string
		// tags are the revision tags that point at revision; otherDefault
		// that a tag "default" points at another revision.
		tags         []string
		otherDefault bool
		config       string
		want         bool
		reason       string // a substring of the reason
	}{
		"injects a plain pod in a namespace labelled istio-injection=enabled": {
			nsLabels: enabled, want: true, reason: "policy is enabled",
		},
		"skips a pod in an unlabelled namespace": {
			want: false, reason: "not labelled",
		},
		"skips every pod of a namespace labelled istio-injection=disabled, even one that opts in": {
			nsLabels: map[string]string{"istio-injection": "disabled"},
			pod:      pod{labels: map[string]string{"sidecar.istio.io/inject": "true"}},
			want:     false, reason: "istio-injection=disabled",
		},
		"injects a pod that opts in by label in an unlabelled namespace": {
			pod:  pod{labels: map[string]string{"sidecar.istio.io/inject": "true"}},
			want: true, reason: "opts in",
		},
		"a pod label false wins over the namespace label": {
			nsLabels: enabled, pod: pod{labels: map[string]string{"sidecar.istio.io/inject": "false"}},
			want: false, reason: "opts out",
		},
		"a pod label false wins over a true annotation": {
			nsLabels: enabled,
			pod: pod{
				labels:      map[string]string{"sidecar.istio.io/inject": "false"},
				annotations: map[string]string{"sidecar.istio.io/inject": "true"},
			},
			want: false, reason: "opts out",
		},
		"the annotation form of opting out is still read": {
			nsLabels: enabled, pod: pod{annotations: map[string]string{"sidecar.istio.io/inject": "false"}},
			want: false, reason: "opts out",
		},
		"skips host network pods": {
			nsLabels: enabled, pod: pod{hostNetwork: true, labels: map[string]string{"sidecar.istio.io/inject": "true"}},
			want: false, reason: "host network",
		},
		"skips an already injected pod": {
			nsLabels: enabled, pod: pod{annotations: map[string]string{"sidecar.istio.io/status": "{}"}},
			want: false, reason: "already injected",
		},
		"skips kube-system whatever its labels": {
			nsLabels: enabled, pod: pod{namespace: "kube-system"},
			want: false, reason: "never injected",
		},
		"istio.io/rev on the namespace selects that revision": {
			nsLabels: map[string]string{"istio.io/rev": "canary"}, revision: "canary",
			want: true,
		},
		"istio.io/rev on the namespace keeps other revisions away": {
			nsLabels: map[string]string{"istio.io/rev": "canary"},
			want:     false, reason: "does not select revision default",
		},
		"istio-injection=enabled selects only the default revision": {
			nsLabels: enabled, revision: "canary",
			want: false, reason: "does not select revision canary",
		},
		"istio.io/rev on the pod selects its revision in an unlabelled namespace": {
			pod: pod{labels: map[string]string{"istio.io/rev": "canary"}}, revision: "canary",
			want: true,
		},
		"istio.io/rev on the namespace naming a tag of this revision selects it": {
			nsLabels: map[string]string{"istio.io/rev": "canary"}, tags: []string{"canary"},
			want: true,
		},
		"istio.io/rev on the pod naming a tag of this revision selects it": {
			pod: pod{labels: map[string]string{"istio.io/rev": "stable"}}, revision: "1-32", tags: []string{"stable"},
			want: true,
		},
		"istio.io/rev naming a tag of another revision keeps this one away": {
			nsLabels: map[string]string{"istio.io/rev": "prod"}, tags: []string{"canary"},
			want: false, reason: "does not select revision default",
		},
		"the tag default on another revision takes istio-injection=enabled from the default revision": {
			nsLabels: enabled, otherDefault: true,
			want: false, reason: "does not select revision default",
		},
		"the tag default on another revision takes opted-in pods of unlabelled namespaces too": {
			pod:          pod{labels: map[string]string{"sidecar.istio.io/inject": "true"}},
			otherDefault: true,
			want:         false, reason: "not labelled",
		},
		"the tag default makes istio-injection=enabled select the revision it points at": {
			nsLabels: enabled, revision: "canary", tags: []string{"default"},
			want: true,
		},
		"the tag default makes istio.io/rev=default select the revision it points at": {
			nsLabels: map[string]string{"istio.io/rev": "default"}, revision: "canary", tags: []string{"default"},
			want: true,
		},
		"policy disabled skips pods that do not opt in": {
			nsLabels: enabled, config: "policy: disabled\ntemplates: {sidecar: ''}",
			want: false, reason: "policy is disabled",
		},
		"policy disabled still injects a pod that opts in": {
			nsLabels: enabled, config: "policy: disabled\ntemplates: {sidecar: ''}",
			pod:  pod{labels: map[string]string{"sidecar.istio.io/inject": "true"}},
			want: true,
		},
		"neverInjectSelector skips a matching pod": {
			nsLabels: enabled,
			config:   "neverInjectSelector: [{matchLabels: {batch: 'true'}}]\ntemplates: {sidecar: ''}",
			pod:      pod{labels: map[string]string{"batch": "true"}},
			want:     false, reason: "neverInjectSelector",
		},
		"alwaysInjectSelector injects a matching pod despite policy disabled": {
			nsLabels: enabled,
			config:   "policy: disabled\nalwaysInjectSelector: [{matchExpressions: [{key: app, operator: Exists}]}]\ntemplates: {sidecar: ''}",
			pod:      pod{labels: map[string]string{"app": "x"}},
			want:     true, reason: "alwaysInjectSelector",
		},
		"neverInjectSelector is checked before alwaysInjectSelector": {
			nsLabels: enabled,
			config:   "neverInjectSelector: [{matchLabels: {a: b}}]\nalwaysInjectSelector: [{matchLabels: {a: b}}]\ntemplates: {sidecar: ''}",
			pod:      pod{labels: map[string]string{"a": "b"}},
			want:     false, reason: "neverInjectSelector",
		},
		"an explicit opt-in wins over neverInjectSelector": {
			nsLabels: enabled,
			config:   "neverInjectSelector: [{matchLabels: {a: b}}]\ntemplates: {sidecar: ''}",
			pod:      pod{labels: map[string]string{"a": "b", "sidecar.istio.io/inject": "true"}},
			want:     true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, _ := defaults(t)
			if tc.config != "" {
				var err error
				if cfg, err = ParseConfig([]byte(tc.config)); err != nil {
					t.Fatal(err)
				}
			}
			ns := tc.pod.namespace
			if ns == "" {
				ns = "apps"
			}
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Labels: tc.pod.labels, Annotations: tc.pod.annotations},
				Spec:       corev1.PodSpec{HostNetwork: tc.pod.hostNetwork},
			}
			n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: tc.nsLabels}}
			d := Decide(p, n, cfg, Selection{Revision: tc.revision, Tags: tc.tags, OtherDefault: tc.otherDefault})
			if d.Inject != tc.want || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("Decide = %+v, want inject=%v with reason containing %q", d, tc.want, tc.reason)
			}
		})
	}
}

func TestInjectRefusesBadInput(t *testing.T) {
	cases := map[string]struct {
		annotations map[string]string
		config      string
		want        string
	}{
		"a proxyCPU that is not a quantity": {
			annotations: map[string]string{"sidecar.istio.io/proxyCPU": "lots"},
			want:        "sidecar.istio.io/proxyCPU",
		},
		"an outbound range that is not a CIDR": {
			annotations: map[string]string{"traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.0.0.0/8,nonsense"},
			want:        `"nonsense"`,
		},
		"an inbound port out of range": {
			annotations: map[string]string{"traffic.sidecar.istio.io/excludeInboundPorts": "70000"},
			want:        "not a port number",
		},
		"an unknown interception mode": {
			annotations: map[string]string{"sidecar.istio.io/interceptionMode": "MAGIC"},
			want:        "interception mode",
		},
		"an unknown log level": {
			annotations: map[string]string{"sidecar.istio.io/logLevel": "loud"},
			want:        "log level",
		},
		"a proxy.istio.io/config with an unknown field": {
			annotations: map[string]string{"proxy.istio.io/config": "noSuchField: 1"},
			want:        "proxy.istio.io/config",
		},
		"an unknown template": {
			annotations: map[string]string{"inject.istio.io/templates": "sidecar,nope"},
			want:        `"nope" is not defined`,
		},
		"a template that fails to render": {
			config: "templates:\n  sidecar: '{{ .Values.no.such.value }}'",
			want:   `template "sidecar"`,
		},
		"a template that renders a field a pod does not have": {
			config: "templates:\n  sidecar: 'spec: {notAField: 1}'",
			want:   "invalid pod",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, values := defaults(t)
			if tc.config != "" {
				var err error
				if cfg, err = ParseConfig([]byte(tc.config)); err != nil {
					t.Fatal(err)
				}
			}
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Annotations: tc.annotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
			}
			_, _, err := Inject(p, injectionNamespace(), cfg, values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Inject error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseConfigRefuses(t *testing.T) {
	cases := map[string]struct{ config, want string }{
		"an unknown policy":           {"policy: sometimes", "policy"},
		"an unknown field":            {"polcy: enabled", "polcy"},
		"a template that won't parse": {"templates: {sidecar: '{{ if }}'}", `template "sidecar"`},
		"a default template that is not defined": {
			"defaultTemplates: [missing]\ntemplates: {sidecar: ''}", `"missing" is not defined`,
		},
		"an invalid selector": {
			"neverInjectSelector: [{matchExpressions: [{key: a, operator: Sometimes}]}]\ntemplates: {sidecar: ''}", "neverInjectSelector",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseConfig error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseValuesLaysOverDefaults(t *testing.T) {
	v, err := ParseValues([]byte(`{"revision":"canary","global":{"proxy":{"image":"registry.local/proxy:dev"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Revision(); got != "canary" {
		t.Errorf("revision = %q", got)
	}
	if got := v.String("global.proxy.image"); got != "registry.local/proxy:dev" {
		t.Errorf("image = %q", got)
	}
	if got := v.String("global.proxy.logLevel"); got != "warning" {
		t.Errorf("logLevel kept from defaults = %q", got)
	}
	if _, err := ParseValues([]byte(`[1,2]`)); err == nil {
		t.Error("a list was accepted as values")
	}
}

func TestAliasesAndTheLegacyTemplate(t *testing.T) {
	cfg, err := ParseConfig([]byte(`template: |
  metadata: {labels: {from: legacy}}
templates:
  extra: |
    metadata: {annotations: {from: extra}}
aliases:
  both: [sidecar, extra]
`))
	if err != nil {
		t.Fatal(err)
	}
	_, values := defaults(t)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Annotations: map[string]string{"inject.istio.io/templates": "both"}}}
	out, _, err := Inject(p, injectionNamespace(), cfg, values)
	if err != nil {
		t.Fatal(err)
	}
	if out.Labels["from"] != "legacy" || out.Annotations["from"] != "extra" {
		t.Fatalf("alias did not render both templates: labels %v annotations %v", out.Labels, out.Annotations)
	}
	if _, err := ParseConfig([]byte("templates: {sidecar: ''}\naliases: {x: [nope]}")); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("an alias of an undefined template: err = %v", err)
	}
}
