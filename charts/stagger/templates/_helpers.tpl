{{/* At most 45 characters: the longest name made from it, <fullname>-controller-leader (a Service), must
stay a DNS label of at most 63. */}}
{{- define "stagger.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "stagger.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "stagger.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
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
