{{/*
Names and labels shared by every template of the chart.
*/}}

{{/* The chart's name, or nameOverride; at most 63 characters (a label value). */}}
{{- define "gpu-autoscaler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's object name: fullnameOverride, else the release name when it already contains the
chart's name, else "<release>-<name>". Two releases in one cluster get different names.
*/}}
{{- define "gpu-autoscaler.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels the Deployment selects its pods by; never change between upgrades. */}}
{{- define "gpu-autoscaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-autoscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The recommended labels of every object. */}}
{{- define "gpu-autoscaler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpu-autoscaler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-autoscaler
{{- end }}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "gpu-autoscaler.serviceAccountName" -}}
{{- default (include "gpu-autoscaler.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* The ConfigMap holding the cloud provider's settings file. */}}
{{- define "gpu-autoscaler.providerConfigName" -}}
{{- printf "%s-provider" (include "gpu-autoscaler.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image reference; the tag defaults to the chart's appVersion. */}}
{{- define "gpu-autoscaler.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Refuses at render time what would only fail when the pod starts: a cloud provider without its
settings file (no AMI or image to launch, no API server for nodes to join).
*/}}
{{- define "gpu-autoscaler.validate" -}}
{{- if and (has .Values.provider (list "aws" "gcp")) (not .Values.providerConfig) }}
{{- fail (printf "provider %q needs providerConfig: the provider's settings file (node classes: image, and how nodes join the cluster). See the README's \"Install in a cluster\"." .Values.provider) }}
{{- end }}
{{- end }}
