{{/*
A git-sync sidecar (a native one: an init container with restartPolicy
Always) keeping policies.gitSync's repository at ref checked out under
mountPath/repo, in volume (and volume-tmp for its HOME). With startup, its
startupProbe holds the Pod's containers back until the first sync is done:
the served policies; a shadow set's sidecar has none, so a candidate ref
that does not sync never keeps qn-webhook from serving.
Arguments: dict "root" $ "name" "ref" "mountPath" "volume" "port" "portName" "startup".
*/}}
{{- define "qn-admission.gitSyncSidecar" -}}
{{- $root := .root -}}
{{- $gitSync := $root.Values.policies.gitSync -}}
- name: {{ .name }}
  image: {{ include "qn-admission.image" (dict "root" $root "image" $gitSync.image) }}
  imagePullPolicy: {{ $gitSync.image.pullPolicy }}
  restartPolicy: Always
  args:
    - --repo={{ $gitSync.repo }}
    - --ref={{ .ref }}
    - --root={{ .mountPath }}
    - --link=repo
    - --period={{ $gitSync.period }}
    - --depth=1
    # Keep retrying after a failed sync; the last good checkout stays
    # in place and qn-webhook keeps serving it.
    - --max-failures=-1
    - --http-bind=:{{ .port }}
    - --http-metrics
    {{- if eq $gitSync.auth.type "https" }}
    # The username comes from $GITSYNC_USERNAME below.
    - --password-file=/etc/git-secret/password
    {{- else if eq $gitSync.auth.type "ssh" }}
    - --ssh-key-file=/etc/git-secret/ssh
    - --ssh-known-hosts=true
    - --ssh-known-hosts-file=/etc/git-secret/known_hosts
    {{- end }}
    {{- range $gitSync.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: HOME
      value: /tmp
    {{- if eq $gitSync.auth.type "https" }}
    - name: GITSYNC_USERNAME
      valueFrom:
        secretKeyRef:
          name: {{ $gitSync.auth.secretName }}
          key: username
    {{- end }}
  ports:
    - name: {{ .portName }}
      containerPort: {{ .port }}
      protocol: TCP
  {{- if .startup }}
  startupProbe:
    httpGet:
      path: /
      port: {{ .portName }}
    periodSeconds: 2
    failureThreshold: 150
  {{- end }}
  livenessProbe:
    httpGet:
      path: /
      port: {{ .portName }}
    periodSeconds: 30
    failureThreshold: 5
  securityContext:
    {{- include "qn-admission.containerSecurityContext" $root | nindent 4 }}
    # The git-sync image's own user, which has an /etc/passwd entry
    # (ssh needs one).
    runAsUser: 65533
    runAsGroup: 65533
  resources:
    {{- toYaml $gitSync.resources | nindent 4 }}
  volumeMounts:
    - name: {{ .volume }}
      mountPath: {{ .mountPath }}
    - name: {{ .volume }}-tmp
      mountPath: /tmp
    {{- if ne $gitSync.auth.type "none" }}
    - name: git-secret
      mountPath: /etc/git-secret
      readOnly: true
    {{- end }}
{{- end -}}
