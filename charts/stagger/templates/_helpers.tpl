{{/* The chart's name, or nameOverride: the app.kubernetes.io/name label and part of the full name. */}}
{{- define "stagger.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 45 | trimSuffix "-" -}}
{{- end -}}

{{/* At most 45 characters: the longest name made from it, <fullname>-controller-leader (a Service), must
stay a DNS label of at most 63. fullnameOverride replaces it whole; else the release name, followed by the
chart's name unless the release name holds it already. */}}
{{- define "stagger.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "stagger.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* On every object of the release; commonLabels added (they cannot replace these). */}}
{{- define "stagger.labels" -}}
app.kubernetes.io/name: {{ include "stagger.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- range $key, $value := .Values.commonLabels }}
{{- if not (hasPrefix "app.kubernetes.io/" $key) }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* By digest when one is given (what runs cannot change under a tag), else by tag. */}}
{{- define "stagger.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* A component's pod metadata: the release's labels, the component, then its podLabels and podAnnotations.
Call with (dict "root" $ "component" "lockd" "values" .Values.lockd). */}}
{{- define "stagger.podMetadata" -}}
labels:
  {{- include "stagger.labels" .root | nindent 2 }}
  app.kubernetes.io/component: {{ .component }}
  {{- range $key, $value := .values.podLabels }}
  {{- if not (hasPrefix "app.kubernetes.io/" $key) }}
  {{ $key }}: {{ $value | quote }}
  {{- end }}
  {{- end }}
{{- with .values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "stagger.controller.name" -}}
{{- printf "%s-controller" (include "stagger.fullname" .) -}}
{{- end -}}

{{- define "stagger.controller.leaderName" -}}
{{- printf "%s-controller-leader" (include "stagger.fullname" .) -}}
{{- end -}}

{{- define "stagger.controller.selectorLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{/* The Secret with the controller's serving certificate (tls.crt, tls.key; ca.crt unless existingSecret). */}}
{{- define "stagger.controller.tlsSecret" -}}
{{- if .Values.controller.tls.existingSecret -}}
{{- .Values.controller.tls.existingSecret -}}
{{- else -}}
{{- printf "%s-controller-tls" (include "stagger.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "stagger.controller.tokenSecret" -}}
{{- printf "%s-controller-token" (include "stagger.fullname" .) -}}
{{- end -}}

{{/* The DNS names the serving certificate must cover: both Services, short and qualified. */}}
{{- define "stagger.controller.dnsNames" -}}
{{- range (list (include "stagger.controller.name" .) (include "stagger.controller.leaderName" .)) }}
- {{ . }}
- {{ . }}.{{ $.Release.Namespace }}
- {{ . }}.{{ $.Release.Namespace }}.svc
{{- end }}
{{- end -}}

{{/* lockd's URL for group grants: the leader Service (the leader labels its own pod). */}}
{{- define "stagger.controller.leaderUrl" -}}
{{- printf "https://%s.%s.svc:443" (include "stagger.controller.leaderName" .) .Release.Namespace -}}
{{- end -}}

{{/* The policy file's text: the policies value when set, else the chart's configs/_policies.yaml. */}}
{{- define "stagger.policies" -}}
{{- if .Values.policies -}}
{{- toYaml .Values.policies -}}
{{- else -}}
{{- .Files.Get "configs/_policies.yaml" -}}
{{- end -}}
{{- end -}}
