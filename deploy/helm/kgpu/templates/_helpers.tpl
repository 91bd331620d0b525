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

{{/* The image by digest once published (image.digest: every node runs the same bytes), else
     by tag. */}}
{{- define "kgpu.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
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

{{/* The resource.k8s.io version DRA objects are written in (v1 on every supported release,
     1.34-1.37, unless the cluster switched it off): the newest one that both the
     cluster serves (.Capabilities.APIVersions: discovery at `helm install`/`upgrade`) and its
     Kubernetes release knows (v1 from 1.34, v1beta2 on 1.33, v1beta1 on 1.32); "" when the
     cluster serves none (DRA off, the default on 1.32 and 1.33): then the chart installs the
     device-plugin side only. `helm template` has no cluster and reports every API version as
     served, so there the release decides. deviceClasses.apiVersion overrides. */}}
{{- define "kgpu.resourceApiVersion" -}}
{{- if .Values.deviceClasses.apiVersion }}
{{- .Values.deviceClasses.apiVersion }}
{{- else }}
{{- $kube := .Capabilities.KubeVersion.Version }}
{{- $known := list }}
{{- if semverCompare ">=1.34.0-0" $kube }}{{ $known = append $known "resource.k8s.io/v1" }}{{ end }}
{{- if semverCompare ">=1.33.0-0" $kube }}{{ $known = append $known "resource.k8s.io/v1beta2" }}{{ end }}
{{- if semverCompare ">=1.32.0-0" $kube }}{{ $known = append $known "resource.k8s.io/v1beta1" }}{{ end }}
{{- $found := "" }}
{{- range $known }}
{{- if and (not $found) ($.Capabilities.APIVersions.Has .) }}{{ $found = . }}{{ end }}
{{- end }}
{{- $found }}
{{- end }}
{{- end }}

{{/* "true" when the agent runs its DRA kubelet plugins: dra.enabled, on a cluster serving
     resource.k8s.io (kgpu.resourceApiVersion). */}}
{{- define "kgpu.draOn" -}}
{{- if and .Values.dra.enabled (include "kgpu.resourceApiVersion" .) }}true{{ end }}
{{- end }}

{{/* The GPU Operator values kgpu accepts and ignores (values.schema.json lets them through,
     each described "GPU Operator value, ignored by kgpu"), as the dotted keys the user set;
     NOTES.txt lists them. Keep the two lists the same (tests/deploy/test_chart_install.py). */}}
{{- define "kgpu.ignoredOperatorKeys" -}}
{{- $found := list }}
{{- range $key := list "operator" "driver" "toolkit" "daemonsets" "validator" "dcgm" "cdi" "psp" "sandboxWorkloads" "sandboxDevicePlugin" "vgpuManager" "vgpuDeviceManager" "vfioManager" "kataManager" "ccManager" "nodeStatusExporter" "gds" "gdrcopy" "node-feature-discovery" "platform" "hostPaths" }}
{{- if hasKey $.Values $key }}{{ $found = append $found $key }}{{ end }}
{{- end }}
{{- $component := list "repository" "image" "version" "imagePullPolicy" "imagePullSecrets" "env" "args" "resources" }}
{{- $nested := dict "devicePlugin" $component "migManager" $component "dcgmExporter" $component "gfd" $component "nfd" (append $component "enabled") "mps" (append $component "enabled") }}
{{- range $parent := keys $nested | sortAlpha }}
{{- range $key := index $nested $parent }}
{{- if hasKey (index $.Values $parent) $key }}{{ $found = append $found (printf "%s.%s" $parent $key) }}{{ end }}
{{- end }}
{{- end }}
{{- join ", " $found }}
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
     controller then keeps present (empty when deviceClasses.create is false or the cluster
     serves no resource.k8s.io version). */}}
{{- define "kgpu.controllerDeviceClasses" -}}
{{- $groups := list }}
{{- if and .Values.deviceClasses.create (include "kgpu.resourceApiVersion" .) }}
{{- if .Values.resources.gpus.enabled }}{{ $groups = append $groups "gpus" }}{{ end }}
{{- if .Values.resources.computeDomains.enabled }}{{ $groups = append $groups "compute-domains" }}{{ end }}
{{- end }}
{{- join "," $groups }}
{{- end }}
