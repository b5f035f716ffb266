{{- define "gateway.name" -}}{{ .Values.name | default .Release.Name }}{{- end }}
{{- define "gateway.serviceAccount" -}}{{ .Values.serviceAccount.name | default (printf "%s-service-account" (include "gateway.name" .)) }}{{- end }}
{{- define "gateway.selector" -}}
{{- if .Values.labels }}
{{- range $k, $v := .Values.labels }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- else }}
app: {{ include "gateway.name" . }}
istio: {{ include "gateway.name" . | trimPrefix "istio-" }}
{{- end }}
{{- end }}
{{- define "gateway.labels" -}}
{{- include "gateway.selector" . }}
istio.io/rev: {{ .Values.revision | default "default" }}
app.kubernetes.io/name: {{ include "gateway.name" . }}
app.kubernetes.io/part-of: discovery
{{- end }}
