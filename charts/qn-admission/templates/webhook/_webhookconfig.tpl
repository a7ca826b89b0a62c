{{/*
Fields both webhook configurations share. Each keeps the failure domain as
small as it can be: our own resource only, never the release namespace or
kube-system, no side effects, a short timeout, an explicit failurePolicy.
*/}}

{{- define "qn-admission.webhookconfig.metadata" -}}
name: {{ include "qn-admission.fullname" . }}
labels:
  {{- include "qn-admission.webhook.labels" . | nindent 2 }}
{{- if eq .Values.certificates.mode "certManager" }}
annotations:
  # cert-manager's cainjector copies the CA of this Certificate into every
  # webhook's caBundle, and again whenever it changes.
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "qn-admission.webhook.fullname" . }}
{{- end }}
{{- end -}}

{{- define "qn-admission.webhookconfig.common" -}}
{{- $w := .root.Values.webhook -}}
clientConfig:
  service:
    name: {{ include "qn-admission.webhook.fullname" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: {{ $w.service.port }}
  {{- if eq .root.Values.certificates.mode "secret" }}
  caBundle: {{ .root.Values.certificates.secret.caBundle }}
  {{- end }}
rules:
{{- if .rules }}
  {{- /* webhook.additionalResources: namespaced objects only, so a
  cluster-scoped resource never escapes the namespace exclusions below. */}}
  {{- range .rules }}
  - apiGroups: {{ toJson .apiGroups }}
    apiVersions: {{ toJson .apiVersions }}
    resources: {{ toJson .resources }}
    operations: {{ toJson (.operations | default (list "CREATE" "UPDATE")) }}
    scope: Namespaced
  {{- end }}
{{- else }}
  - apiGroups: ["qn.dev"]
    apiVersions: ["v1alpha1"]
    resources: [{{ .resource | default "quantumnodes" | quote }}]
    operations: {{ toJson .operations }}
    scope: Namespaced
{{- end }}
# Requests for another version of the resource are converted and sent too.
matchPolicy: Equivalent
# Only an exclusion list in the values (who controls the release decides):
# kubernetes.io/metadata.name is set by the API server from the namespace's
# name and cannot be changed, unlike a label any namespace editor may set.
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ prepend $w.namespaceSelector.excludeNamespaces .root.Release.Namespace | uniq | toJson }}
failurePolicy: {{ .failurePolicy | default $w.failurePolicy }}
sideEffects: None
timeoutSeconds: {{ $w.timeoutSeconds }}
admissionReviewVersions: ["v1"]
{{- end -}}


{{/*
The flags that tell qn-webhook what webhook.additionalResources register
it for, one --additional-resources=RESOURCE.VERSION[.GROUP]:OPS per
resource (qnctl eval takes the same).
*/}}
{{- define "qn-admission.additionalResources.args" -}}
{{- range .Values.webhook.additionalResources }}
{{- $ops := join "," (.operations | default (list "CREATE" "UPDATE")) }}
{{- $entry := . }}
{{- range $group := $entry.apiGroups }}
{{- range $version := $entry.apiVersions }}
{{- range $resource := $entry.resources }}
{{ printf "- --additional-resources=%s.%s%s:%s" $resource $version (ternary (printf ".%s" $group) "" (ne $group "")) $ops }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
