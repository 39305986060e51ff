{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "perfsched.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name: release-chart, unless the release name already contains the chart name. */}}
{{- define "perfsched.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "perfsched.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels shared by every object. */}}
{{- define "perfsched.labels" -}}
helm.sh/chart: {{ include "perfsched.chart" . }}
app.kubernetes.io/name: {{ include "perfsched.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: perfsched
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component; call with (dict "ctx" $ "component" "extender"). */}}
{{- define "perfsched.selectorLabels" -}}
app.kubernetes.io/name: {{ include "perfsched.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "perfsched.componentLabels" -}}
{{ include "perfsched.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "perfsched.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "perfsched.serviceAccountName" -}}
{{- printf "%s-%s" (include "perfsched.fullname" .ctx) .component -}}
{{- end -}}

{{- define "perfsched.extenderService" -}}
{{- printf "%s-extender" (include "perfsched.fullname" .) -}}
{{- end -}}

{{- define "perfsched.tlsSecretName" -}}
{{- default (printf "%s-extender-tls" (include "perfsched.fullname" .)) .Values.tls.secretName -}}
{{- end -}}

{{- define "perfsched.webhookService" -}}
{{- printf "%s-operator-webhook" (include "perfsched.fullname" .) -}}
{{- end -}}

{{- define "perfsched.webhookSecretName" -}}
{{- default (printf "%s-operator-webhook-tls" (include "perfsched.fullname" .)) .Values.operator.webhook.secretName -}}
{{- end -}}

{{/* Environment shared by the extender and the operator. */}}
{{- define "perfsched.commonEnv" -}}
- name: PERFSCHED_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: PERFSCHED_NAMESPACE
  value: {{ .Values.watchNamespace | quote }}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end -}}
