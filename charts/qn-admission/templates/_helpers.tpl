{{/*
Names. fullname is "<release>-<chart>" unless the release name already holds
the chart name. Every object name derives from it; it is cut to 44
characters so that derived Service and Secret names stay DNS labels (63).
*/}}
{{- define "qn-admission.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "qn-admission.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 44 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 44 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 44 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "qn-admission.webhook.fullname" -}}
{{- printf "%s-webhook" (include "qn-admission.fullname" .) -}}
{{- end -}}

{{- define "qn-admission.controller.fullname" -}}
{{- printf "%s-controller" (include "qn-admission.fullname" .) -}}
{{- end -}}

{{/* The serving certificate's Secret (cert-manager writes it, or the user brings it). */}}
{{- define "qn-admission.webhook.tlsSecret" -}}
{{- if eq .Values.certificates.mode "secret" -}}
{{- .Values.certificates.secret.name -}}
{{- else -}}
{{- printf "%s-tls" (include "qn-admission.webhook.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "qn-admission.policies.configMapName" -}}
{{- default (printf "%s-policies" (include "qn-admission.fullname" .)) .Values.policies.configMap.existingName -}}
{{- end -}}

{{/*
Rate windows. The bundled Redis runs only when windows are shared and no
address of another Redis is given.
*/}}
{{- define "qn-admission.redis.fullname" -}}
{{- printf "%s-redis" (include "qn-admission.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "qn-admission.redis.bundled" -}}
{{- if and (eq .Values.windows.store "redis") .Values.windows.redis.bundled.enabled -}}true{{- end -}}
{{- end -}}

{{- define "qn-admission.redis.address" -}}
{{- if include "qn-admission.redis.bundled" . -}}
{{- printf "%s.%s.svc:6379" (include "qn-admission.redis.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- .Values.windows.redis.address -}}
{{- end -}}
{{- end -}}

{{- define "qn-admission.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qn-admission.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end -}}

{{- define "qn-admission.redis.labels" -}}
{{ include "qn-admission.labels" . }}
app.kubernetes.io/component: redis
{{- end -}}

{{/* Labels. */}}
{{- define "qn-admission.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "qn-admission.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: qn-admission
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "qn-admission.webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qn-admission.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "qn-admission.webhook.labels" -}}
{{ include "qn-admission.labels" . }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "qn-admission.controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qn-admission.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "qn-admission.controller.labels" -}}
{{ include "qn-admission.labels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{/*
image renders the reference of one image block of values.yaml (every image
the chart runs goes through it): repository@digest when a digest is set (it
wins over the tag), else repository:tag. Only the chart's own images may
leave the tag empty (the schema requires it of the others): it defaults to
the chart's appVersion, the release that built them.
*/}}
{{- define "qn-admission.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Security contexts. Every container runs as a non-root user with a read-only
root filesystem, no privilege escalation, no capabilities, and the runtime's
default seccomp profile.
*/}}
{{- define "qn-admission.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "qn-admission.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
Policy directory inside the qn-webhook container, or empty for the bundled
policies. git-sync publishes each commit as a worktree behind the symlink
"<root>/repo", swapped atomically; the server watches through it. Both
containers mount the checkout at /git, so the link resolves the same in each.
*/}}
{{- define "qn-admission.shadowPolicyDir" -}}
{{- $shadow := .Values.policies.shadow -}}
{{- if eq $shadow.source "configMap" -}}
/etc/qn-webhook/policies-shadow
{{- else if eq $shadow.source "gitSync" -}}
{{- $path := trimAll "/" .Values.policies.gitSync.path -}}
{{- if $path -}}
{{- printf "/git-shadow/repo/%s" $path -}}
{{- else -}}
/git-shadow/repo
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "qn-admission.policyDir" -}}
{{- if eq .Values.policies.source "configMap" -}}
/etc/qn-webhook/policies
{{- else if eq .Values.policies.source "gitSync" -}}
{{- $path := trimAll "/" .Values.policies.gitSync.path -}}
{{- if $path -}}
{{- printf "/git/repo/%s" $path -}}
{{- else -}}
/git/repo
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
admissionPolicy.params says what writes the QuantumNodeRoleTable the
role table's ValidatingAdmissionPolicy reads: "chart" for the bundled
policies (the chart's copy of qnctl vap's output), "controller" for a
configMap source (qn-controller compiles it from the ConfigMap it follows,
--role-table), or nothing, and then no policy is rendered: mode off, a
gitSync source (qn-controller's checkout feeds its audit; it is given no
--role-table for it), or no qn-controller.
*/}}
{{- define "qn-admission.admissionPolicy.params" -}}
{{- if ne .Values.admissionPolicy.mode "off" -}}
{{- if eq .Values.policies.source "bundled" -}}
chart
{{- else if and (eq .Values.policies.source "configMap") .Values.controller.enabled -}}
controller
{{- end -}}
{{- end -}}
{{- end -}}

{{/* hours turns a "<n>h" duration (the schema allows no other form) into n. */}}
{{- define "qn-admission.hours" -}}
{{- trimSuffix "h" . | int -}}
{{- end -}}

{{/* milliseconds turns a "<n>ms" or "<n>s" duration into milliseconds. */}}
{{- define "qn-admission.milliseconds" -}}
{{- if hasSuffix "ms" . -}}
{{- trimSuffix "ms" . | int -}}
{{- else -}}
{{- mul (trimSuffix "s" . | int) 1000 -}}
{{- end -}}
{{- end -}}

{{/*
validate fails the render on combinations of values the schema cannot
express, each with a sentence that says what to change.
*/}}
{{- define "qn-admission.validate" -}}
{{- $w := .Values.webhook -}}
{{- $evalMs := include "qn-admission.milliseconds" $w.policyEvalTimeout | int -}}
{{- if ge $evalMs (mul $w.timeoutSeconds 1000 | int) -}}
{{- fail (printf "webhook.policyEvalTimeout (%s) must be shorter than webhook.timeoutSeconds (%ds): otherwise the API server gives up before the policy answers" $w.policyEvalTimeout (int $w.timeoutSeconds)) -}}
{{- end -}}
{{- if and $w.podDisruptionBudget.enabled (gt (int $w.replicas) 1) (ge (int $w.podDisruptionBudget.minAvailable) (int $w.replicas)) -}}
{{- fail (printf "webhook.podDisruptionBudget.minAvailable (%d) must be below webhook.replicas (%d), or no node could ever be drained" (int $w.podDisruptionBudget.minAvailable) (int $w.replicas)) -}}
{{- end -}}
{{- if eq .Values.certificates.mode "certManager" -}}
{{- range $name := list "ca" "serving" -}}
{{- $c := index $.Values.certificates.certManager $name -}}
{{- if ge (include "qn-admission.hours" $c.renewBefore | int) (include "qn-admission.hours" $c.duration | int) -}}
{{- fail (printf "certificates.certManager.%s.renewBefore (%s) must be shorter than its duration (%s)" $name $c.renewBefore $c.duration) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $win := .Values.windows -}}
{{- if ge (include "qn-admission.milliseconds" $win.storeTimeout | int) (mul $w.timeoutSeconds 1000 | int) -}}
{{- fail (printf "windows.storeTimeout (%s) must be shorter than webhook.timeoutSeconds (%ds): the role's onStoreError must answer before the API server gives up" $win.storeTimeout (int $w.timeoutSeconds)) -}}
{{- end -}}
{{- if eq $win.store "redis" -}}
{{- $r := $win.redis -}}
{{- $given := list -}}
{{- if $r.address -}}{{- $given = append $given (printf "windows.redis.address (%s)" $r.address) -}}{{- end -}}
{{- if $r.sentinel.addresses -}}{{- $given = append $given (printf "windows.redis.sentinel.addresses (%s)" (join "," $r.sentinel.addresses)) -}}{{- end -}}
{{- if $r.cluster.addresses -}}{{- $given = append $given (printf "windows.redis.cluster.addresses (%s)" (join "," $r.cluster.addresses)) -}}{{- end -}}
{{- if and $r.bundled.enabled $given -}}
{{- fail (printf "%s is set and windows.redis.bundled.enabled is true: use your Redis (set bundled.enabled=false) or the bundled one (empty the address)" (join " and " $given)) -}}
{{- end -}}
{{- if gt (len $given) 1 -}}
{{- fail (printf "%s are all set: give one way to reach your Redis" (join " and " $given)) -}}
{{- end -}}
{{- if and (not $r.bundled.enabled) (not $given) -}}
{{- fail "windows.store is redis but there is no Redis: set windows.redis.address to host:port of yours (or sentinel.addresses with sentinel.masterName, or cluster.addresses), or windows.redis.bundled.enabled=true" -}}
{{- end -}}
{{- if ne (empty $r.sentinel.addresses) (empty $r.sentinel.masterName) -}}
{{- fail (printf "windows.redis.sentinel.addresses (%s) and windows.redis.sentinel.masterName (%q) go together" (join "," $r.sentinel.addresses) $r.sentinel.masterName) -}}
{{- end -}}
{{- if and $r.sentinel.passwordSecret.name (not $r.sentinel.addresses) -}}
{{- fail "windows.redis.sentinel.passwordSecret.name is set without windows.redis.sentinel.addresses" -}}
{{- end -}}
{{- if and $r.bundled.enabled $r.tls.enabled -}}
{{- fail "windows.redis.tls.enabled needs your own Redis (windows.redis.address): the bundled Redis speaks plain text inside the cluster, reachable only from the webhook Pods" -}}
{{- end -}}
{{- end -}}
{{- if and (eq .Values.policies.source "configMap") (not .Values.policies.configMap.existingName) (not .Values.policies.configMap.includeBundled) (not (hasKey .Values.policies.configMap.files "roles.yaml")) -}}
{{- fail "policies.configMap.files needs a roles.yaml when policies.configMap.includeBundled is false: qn-webhook refuses a policy directory without one" -}}
{{- end -}}
{{- end -}}
