{{/* The chart name, or nameOverride. */}}
{{- define "cheiron.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name alone when it already contains the chart name. */}}
{{- define "cheiron.fullname" -}}
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

{{/* Labels that select the Pods of component `.component` (dict "root" $ "component" "..."). */}}
{{- define "cheiron.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cheiron.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The recommended labels of an object of component `.component`. */}}
{{- define "cheiron.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "cheiron.selectorLabels" . }}
app.kubernetes.io/part-of: cheiron
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{- define "cheiron.serviceAccountName" -}}
{{- default (include "cheiron.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "cheiron.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "cheiron.fullname" .)) .Values.certificates.secretName }}
{{- end }}

{{- define "cheiron.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Hardened container securityContext, shared by cheiron and the cheiron-certs Jobs. */}}
{{- define "cheiron.securityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* Refuse combinations the schema cannot express. */}}
{{- define "cheiron.validate" -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail "leaderElection.enabled=false runs a controller on every replica: set replicaCount to 1, or keep leader election on" }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) (int .Values.shutdownDelaySeconds) }}
{{- fail "terminationGracePeriodSeconds must be longer than shutdownDelaySeconds, or Pods are killed while still draining" }}
{{- end }}
{{- if and (eq .Values.certificates.source "secret") (not .Values.certificates.secretName) }}
{{- fail "certificates.source=secret needs certificates.secretName: the kubernetes.io/tls Secret you created" }}
{{- end }}
{{- end }}
