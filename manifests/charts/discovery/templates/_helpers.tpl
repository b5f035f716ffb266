{{- define "discovery.name" -}}discovery{{ .Values.suffix }}{{- end }}
{{- define "discovery.istiod" -}}istiod{{ .Values.suffix }}{{- end }}
{{- define "discovery.selector" -}}
app: discovery
istio.io/rev: {{ .Values.revisionName }}
{{- end }}
{{- define "discovery.labels" -}}
{{ include "discovery.selector" . }}
istio: pilot
app.kubernetes.io/name: discovery
app.kubernetes.io/part-of: discovery
{{- end }}
{{- define "discovery.host" -}}
{{- if .Values.remote -}}
{{ .Values.spec.values.global.remotePilotAddress }}
{{- else -}}
{{ include "discovery.istiod" . }}.{{ .Values.namespace }}.svc:15012
{{- end -}}
{{- end }}
{{- /* The webhook configurations this revision renders, and its RBAC names. */ -}}
{{- define "discovery.injectorWebhook" -}}istio-sidecar-injector{{ .Values.suffix }}{{- end }}
{{- define "discovery.validatorWebhook" -}}istio-validator{{ .Values.suffix }}-{{ .Values.namespace }}{{- end }}
