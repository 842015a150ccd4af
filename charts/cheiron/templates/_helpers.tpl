{{/* The chart name, or nameOverride. */}}
{{- define "cheiron.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name: the release name alone when it already contains the chart name, else
`<release>-<name>`; fullnameOverride replaces it. Cut to 36 characters: the chart appends
suffixes to it (the longest is `-credential-provider-tokens`, 27), and every name it renders
must stay a DNS label (at most 63) for a release name as long as Helm allows (53). One cut for
all names, not one per name, so that two suffixes never meet on the same name.
*/}}
{{- define "cheiron.fullname" -}}
{{- $max := 36 }}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc $max | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc $max | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc $max | trimSuffix "-" }}
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
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The workloads of `deployment`, space-separated: `webhook controller` (split) or `combined`. */}}
{{- define "cheiron.workloads" -}}
{{- if eq .Values.deployment "combined" }}combined{{ else }}webhook controller{{ end }}
{{- end }}

{{/* The component label of workload `.workload` (dict "root" $ "workload" "..."): `cheiron run`
serves the webhook, so its Pods are webhook Pods. */}}
{{- define "cheiron.component" -}}
{{- ternary "controller" "webhook" (eq .workload "controller") }}
{{- end }}

{{/* The name of workload `.workload`'s Deployment, PodDisruptionBudget and NetworkPolicy. */}}
{{- define "cheiron.workloadName" -}}
{{- $fullname := include "cheiron.fullname" .root }}
{{- if eq .workload "combined" }}{{ $fullname }}{{ else }}{{ printf "%s-%s" $fullname .workload }}{{ end }}
{{- end }}

{{/* The ServiceAccount of workload `.workload`: serviceAccount.names.<workload> (split) if set,
else `<base>-webhook` and `<base>-controller` (split), `<base>` (combined), `<base>` being
serviceAccount.name or the full name. */}}
{{- define "cheiron.workloadServiceAccount" -}}
{{- $base := default (include "cheiron.fullname" .root) .root.Values.serviceAccount.name }}
{{- $names := .root.Values.serviceAccount.names | default dict }}
{{- if eq .workload "combined" }}{{ $base }}
{{- else }}{{ default (printf "%s-%s" $base .workload) (get $names .workload) }}
{{- end }}
{{- end }}

{{/* The ServiceAccount of the cheiron-certs hook Jobs: serviceAccount.names.certificates, or
`<fullname>-certs`. */}}
{{- define "cheiron.certificatesServiceAccount" -}}
{{- default (printf "%s-certs" (include "cheiron.fullname" .)) (dig "names" "certificates" "" .Values.serviceAccount) }}
{{- end }}

{{/* The node agents' ServiceAccount, in the node namespace: serviceAccount.names.nodeAgent, or
`<fullname>-node-agent`. */}}
{{- define "cheiron.nodeAgentServiceAccount" -}}
{{- default (printf "%s-node-agent" (include "cheiron.fullname" .)) (dig "names" "nodeAgent" "" .Values.serviceAccount) }}
{{- end }}

{{/* The ServiceAccount the webhook's ClusterRole is bound to. */}}
{{- define "cheiron.webhookIdentity" -}}
{{- include "cheiron.workloadServiceAccount" (dict "root" . "workload" (ternary "combined" "webhook" (eq .Values.deployment "combined"))) }}
{{- end }}

{{/* The ServiceAccount the controller's ClusterRole and Lease Role are bound to. */}}
{{- define "cheiron.controllerIdentity" -}}
{{- include "cheiron.workloadServiceAccount" (dict "root" . "workload" (ternary "combined" "controller" (eq .Values.deployment "combined"))) }}
{{- end }}

{{- define "cheiron.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "cheiron.fullname" .)) .Values.certificates.secretName }}
{{- end }}

{{/* `repository@digest` when image.digest is set (the tag is then ignored), else `repository:tag`. */}}
{{- define "cheiron.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Hardened container securityContext, shared by cheiron and the cheiron-certs Jobs. */}}
{{- define "cheiron.securityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* Refuse combinations the schema cannot express. */}}
{{- define "cheiron.validate" -}}
{{- if not .Values.leaderElection.enabled }}
{{- if and (eq .Values.deployment "combined") (gt (int .Values.replicaCount) 1) }}
{{- fail "leaderElection.enabled=false runs a controller on every replica: set replicaCount to 1, or keep leader election on" }}
{{- end }}
{{- if and (ne .Values.deployment "combined") (gt (int .Values.controller.replicaCount) 1) }}
{{- fail "leaderElection.enabled=false runs a controller on every replica: set controller.replicaCount to 1, or keep leader election on" }}
{{- end }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) (int .Values.shutdownDelaySeconds) }}
{{- fail "terminationGracePeriodSeconds must be longer than shutdownDelaySeconds, or Pods are killed while still draining" }}
{{- end }}
{{- if eq (int .Values.webhook.port) 8080 }}
{{- fail "webhook.port 8080 is the admin port (/healthz, /readyz, /metrics): choose another" }}
{{- end }}
{{- if and .Values.tests.enabled .Values.tests.namespace (not (include "cheiron.served" (dict "root" . "namespace" .Values.tests.namespace))) }}
{{- fail (printf "tests.namespace %s is never sent to the webhook, so helm test would fail: choose a namespace cheiron serves (or tests.enabled=false)" .Values.tests.namespace) }}
{{- end }}
{{- if eq .Values.deployment "combined" }}
{{- if or (dig "names" "webhook" "" .Values.serviceAccount) (dig "names" "controller" "" .Values.serviceAccount) }}
{{- fail "serviceAccount.names.webhook and serviceAccount.names.controller are for deployment=split: combined runs under one ServiceAccount, serviceAccount.name" }}
{{- end }}
{{- else }}
{{- if eq (include "cheiron.webhookIdentity" .) (include "cheiron.controllerIdentity" .) }}
{{- fail "serviceAccount.names.webhook and serviceAccount.names.controller name the same ServiceAccount: split runs the webhook and the controller under identities of their own (or use deployment=combined)" }}
{{- end }}
{{- if eq (include "cheiron.webhookIdentity" .) (include "cheiron.certificatesServiceAccount" .) }}
{{- fail "serviceAccount.names.certificates names the webhook's ServiceAccount: the cheiron-certs Jobs' rights (Secrets) would reach the webhook, which reads no Secret; give the Jobs an account of their own" }}
{{- end }}
{{- end }}
{{- if and (eq .Values.certificates.source "secret") (not .Values.certificates.secretName) }}
{{- fail "certificates.source=secret needs certificates.secretName: the kubernetes.io/tls Secret you created" }}
{{- end }}
{{- end }}

{{/*
The node agents' namespace (docs/node.md): node.namespace, default `<release namespace>-node`
(the release namespace cut to 58 characters: a namespace name is a DNS label).
*/}}
{{- define "cheiron.nodeNamespace" -}}
{{- default (printf "%s-node" (.Release.Namespace | trunc 58 | trimSuffix "-")) .Values.node.namespace }}
{{- end }}

{{/*
The pull secrets of every cheiron Pod: global.imagePullSecrets (shared with a parent chart's
other subcharts), then imagePullSecrets, each name once, as a YAML list (empty: none).
*/}}
{{- define "cheiron.imagePullSecrets" -}}
{{- $global := dig "imagePullSecrets" (list) (.Values.global | default dict) }}
{{- with concat $global .Values.imagePullSecrets | uniq }}
{{- toYaml . }}
{{- end }}
{{- end }}


{{/* "true" when namespace `.namespace` is sent to the webhook as far as the chart knows (not
the release namespace, kube-system or an excluded one), else empty. */}}
{{- define "cheiron.served" -}}
{{- $ns := .namespace }}
{{- if not (or (eq $ns .root.Release.Namespace) (eq $ns "kube-system") (has $ns .root.Values.webhook.namespaceSelector.excludeNamespaces)) }}true{{ end }}
{{- end }}

{{/*
The namespace of `helm test`'s manager and dry-run Pod: tests.namespace, else `default` when
the webhook serves it; empty when there is none (the release is in `default`): no test then.
*/}}
{{- define "cheiron.testNamespace" -}}
{{- if .Values.tests.enabled }}
{{- $ns := default "default" .Values.tests.namespace }}
{{- if include "cheiron.served" (dict "root" . "namespace" $ns) }}{{ $ns }}{{ end }}
{{- end }}
{{- end }}
