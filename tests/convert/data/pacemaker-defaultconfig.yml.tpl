# woehrl01/pod-pacemaker, charts/pod-pacemaker/templates/defaultconfig.yml at commit 79e42756b542ffad5ce258d235f4a3db9310c4a0: the Helm template of the chart's default PacemakerConfig, verbatim below this comment.
{{ if .Values.defaultThrottleConfig.enabled }}
apiVersion: woehrl.net/v1alpha
kind: PacemakerConfig
metadata:
  name: default-pacemaker-config
spec:
  priority: 0
  nodeSelector: {}
  throttleConfig: {{ .Values.defaultThrottleConfig.config | toYaml | nindent 4 }}
{{ end }}
