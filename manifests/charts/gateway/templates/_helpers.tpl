{{- define "gateway.selector" -}}
{{- range $k, $v := .Values.gateway.label }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end }}
{{- define "gateway.labels" -}}
{{- include "gateway.selector" . }}
istio.io/rev: {{ .Values.revisionName }}
app.kubernetes.io/name: {{ .Values.gateway.name }}
app.kubernetes.io/part-of: discovery
{{- end }}
