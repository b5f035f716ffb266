{{- /* Names: each revision's objects carry its suffix. */ -}}
{{- define "discovery.suffix" -}}{{ with .Values.revision }}-{{ . }}{{ end }}{{- end }}
{{- define "discovery.revisionName" -}}{{ .Values.revision | default "default" }}{{- end }}
{{- define "discovery.name" -}}discovery{{ include "discovery.suffix" . }}{{- end }}
{{- define "discovery.istiod" -}}istiod{{ include "discovery.suffix" . }}{{- end }}
{{- define "discovery.selector" -}}
app: discovery
istio.io/rev: {{ include "discovery.revisionName" . }}
{{- end }}
{{- define "discovery.labels" -}}
{{ include "discovery.selector" . }}
istio: pilot
app.kubernetes.io/name: discovery
app.kubernetes.io/part-of: discovery
{{- end }}
{{- /* The webhook configurations this revision renders, and its RBAC names. */ -}}
{{- define "discovery.injectorWebhook" -}}istio-sidecar-injector{{ include "discovery.suffix" . }}{{- end }}
{{- define "discovery.validatorWebhook" -}}istio-validator{{ include "discovery.suffix" . }}-{{ .Release.Namespace }}{{- end }}
{{- define "discovery.tagWebhook" -}}istio-revision-tag-{{ .tag }}{{ if ne .ctx.Release.Namespace "istio-system" }}-{{ .ctx.Release.Namespace }}{{ end }}{{- end }}

{{- /*
  Images, as Istio names them: global.hub and global.tag name every image;
  pilot.hub / pilot.tag name discovery's over them, and pilot.image may be
  a whole reference. discovery's own defaults are ghcr.io/meshplane and
  the chart's appVersion (the installer's build); the proxies' are
  global.proxy.hub and global.proxy.tag.
*/ -}}
{{- define "discovery.image" -}}
{{- $p := .Values.pilot -}}
{{- if contains "/" ($p.image | default "") -}}
{{ $p.image }}
{{- else -}}
{{ $p.hub | default .Values.global.hub | default "ghcr.io/meshplane" }}/{{ $p.image | default "discovery" }}:{{ $p.tag | default .Values.global.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}
{{- define "discovery.proxyHub" -}}{{ .Values.global.hub | default .Values.global.proxy.hub }}{{- end }}
{{- define "discovery.proxyTag" -}}{{ .Values.global.tag | default .Values.global.proxy.tag }}{{- end }}

{{- define "discovery.trustDomain" -}}{{ (.Values.meshConfig | default dict).trustDomain | default "cluster.local" }}{{- end }}
{{- define "discovery.domainSuffix" -}}{{ .Values.global.proxy.clusterDomain | default "cluster.local" }}{{- end }}

{{- /*
  The server's log level: pilot.logLevel, else the default scope's level of
  Istio's global.logging.level ("default:info,ads:debug"; a bare level is
  the default scope's), Istio's fatal read as error.
*/ -}}
{{- define "discovery.logLevel" -}}
{{- $level := "info" -}}
{{- range splitList "," ((.Values.global.logging | default dict).level | default "") -}}
{{- $kv := splitList ":" (trim .) -}}
{{- if eq (len $kv) 1 -}}{{- $level = index $kv 0 -}}{{- else if eq (index $kv 0) "default" -}}{{- $level = index $kv 1 -}}{{- end -}}
{{- end -}}
{{- $level = get (dict "warning" "warn" "fatal" "error") $level | default $level -}}
{{ .Values.pilot.logLevel | default $level }}
{{- end }}
{{- define "discovery.logFormat" -}}
{{ .Values.pilot.logFormat | default (ternary "json" "text" (.Values.global.logAsJson | default false)) }}
{{- end }}

{{- /*
  The remote discovery (istiodRemote.enabled): global.remotePilotAddress is
  a host, an IP address (IPv6 with or without brackets) or host:port; the
  port is 15012 by default. remoteHost is the host as a URL writes it.
*/ -}}
{{- define "discovery.remoteHost" -}}
{{- $a := .Values.global.remotePilotAddress -}}
{{- if hasPrefix "[" $a -}}
{{ regexReplaceAll "\\]:.*$" $a "]" }}
{{- else if gt (len (splitList ":" $a)) 2 -}}
[{{ $a }}]
{{- else -}}
{{ index (splitList ":" $a) 0 }}
{{- end -}}
{{- end }}
{{- define "discovery.remoteAddress" -}}
{{- $a := .Values.global.remotePilotAddress -}}
{{- if or (regexMatch "^\\[.*\\]:[0-9]+$" $a) (eq (len (splitList ":" $a)) 2) -}}
{{ $a }}
{{- else -}}
{{ include "discovery.remoteHost" . }}:15012
{{- end -}}
{{- end }}

{{- /* Where proxies reach discovery: its istiod Service, or the remote one. */ -}}
{{- define "discovery.host" -}}
{{- if .Values.istiodRemote.enabled -}}
{{ include "discovery.remoteAddress" . }}
{{- else -}}
{{ include "discovery.istiod" . }}.{{ .Release.Namespace }}.svc:15012
{{- end -}}
{{- end }}

{{- /* meshConfig with what depends on the installation filled in. */ -}}
{{- define "discovery.meshConfig" -}}
{{- $mc := deepCopy (.Values.meshConfig | default dict) -}}
{{- $_ := set $mc "rootNamespace" ($mc.rootNamespace | default .Release.Namespace) -}}
{{- $_ = set $mc "trustDomain" (include "discovery.trustDomain" .) -}}
{{- $dc := $mc.defaultConfig | default dict -}}
{{- $_ = set $dc "discoveryAddress" ($dc.discoveryAddress | default (include "discovery.host" .)) -}}
{{- $_ = set $mc "defaultConfig" $dc -}}
{{- $t := .Values.telemetry | default dict -}}
{{- $v2 := $t.v2 | default dict -}}
{{- if and (not $mc.defaultProviders) (ne (toString $t.enabled) "false") (ne (toString $v2.enabled) "false") (ne (toString ($v2.prometheus | default dict).enabled) "false") -}}
{{- $_ = set $mc "defaultProviders" (dict "metrics" (list "prometheus")) -}}
{{- end -}}
{{- toYaml $mc -}}
{{- end }}

{{- define "discovery.nativeSidecar" -}}
{{- or .Values.sidecarInjectorWebhook.nativeSidecar (eq (toString (.Values.pilot.env | default dict).ENABLE_NATIVE_SIDECARS) "true") -}}
{{- end }}
