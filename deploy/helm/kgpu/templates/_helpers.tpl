{{/* Names, labels and the settings several templates share. */}}

{{- define "kgpu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kgpu.fullname" -}}
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

{{/* Name of one process's objects: "<fullname>-agent", "<fullname>-controller". */}}
{{- define "kgpu.componentName" -}}
{{- printf "%s-%s" (include "kgpu.fullname" .context) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kgpu.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kgpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one process (dict "context" $ "component" "agent"). The component label
     is also how tests/deploy tie a ServiceAccount and its Roles to the process that uses them. */}}
{{- define "kgpu.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kgpu.name" .context }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kgpu.componentLabels" -}}
{{ include "kgpu.labels" .context }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kgpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* ServiceAccount of one process (dict "context" $ "component" "agent"). */}}
{{- define "kgpu.serviceAccountName" -}}
{{- $sa := (index .context.Values .component).serviceAccount }}
{{- if $sa.create }}
{{- default (include "kgpu.componentName" .) $sa.name }}
{{- else }}
{{- default "default" $sa.name }}
{{- end }}
{{- end }}

{{/* The resource.k8s.io version for DeviceClasses: v1, the one every supported release
     (1.34-1.37, Chart.yaml's kubeVersion) serves by default; deviceClasses.apiVersion overrides
     it for a cluster that switched v1 off. */}}
{{- define "kgpu.resourceApiVersion" -}}
{{- default "resource.k8s.io/v1" .Values.deviceClasses.apiVersion }}
{{- end }}

{{/* The agent's settings file: the chart's values that have the GPU Operator's names, in the
     GPU Operator's shape, which `kgpu agent --config` reads as GPU Operator Helm values. */}}
{{- define "kgpu.agentSettings" -}}
{{- $dp := dict "default" .Values.devicePlugin.config.default }}
{{- if and .Values.devicePlugin.config.create .Values.devicePlugin.config.data }}
{{- $_ := set $dp "data" .Values.devicePlugin.config.data }}
{{- end }}
{{- $mig := dict "default" .Values.migManager.config.default }}
{{- if and .Values.migManager.config.create .Values.migManager.config.data }}
{{- $_ := set $mig "data" .Values.migManager.config.data }}
{{- end }}
{{- $settings := dict "mig" (dict "strategy" .Values.mig.strategy) "devicePlugin" (dict "config" $dp "gpuOwnership" (.Values.devicePlugin.gpuOwnership | default "shared")) "migManager" (dict "config" $mig) }}
{{- toYaml $settings }}
{{- end }}

{{/* The controller's admission webhook: its Service and the Secret holding its certificate. */}}
{{- define "kgpu.webhookService" -}}
{{- printf "%s-webhook" (include "kgpu.componentName" (dict "context" . "component" "controller")) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kgpu.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "kgpu.componentName" (dict "context" . "component" "controller")) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* --device-classes of kgpu controller: the DeviceClass groups the chart installs, which the
     controller then keeps present (empty when deviceClasses.create is false). */}}
{{- define "kgpu.controllerDeviceClasses" -}}
{{- $groups := list }}
{{- if .Values.deviceClasses.create }}
{{- if .Values.resources.gpus.enabled }}{{ $groups = append $groups "gpus" }}{{ end }}
{{- if .Values.resources.computeDomains.enabled }}{{ $groups = append $groups "compute-domains" }}{{ end }}
{{- end }}
{{- join "," $groups }}
{{- end }}
