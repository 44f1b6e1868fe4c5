{{/*
Chart name.
*/}}
{{- define "binlog-relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name, at most 52 characters: StatefulSet pods add "-<ordinal>", the controller
revision label "-<hash>" (63 in all), and the services "-headless" / "-metrics".
*/}}
{{- define "binlog-relay.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "binlog-relay.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "binlog-relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "binlog-relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "binlog-relay.labels" -}}
helm.sh/chart: {{ include "binlog-relay.chart" . }}
{{ include "binlog-relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: binlog-relay
{{- end }}

{{- define "binlog-relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "binlog-relay.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "binlog-relay.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The Secret with the upstream password and the users file: chart-created or auth.existingSecret.
*/}}
{{- define "binlog-relay.secretName" -}}
{{- default (include "binlog-relay.fullname" .) .Values.auth.existingSecret }}
{{- end }}

{{/* Paths inside the pods. */}}
{{- define "binlog-relay.configDir" -}}/etc/binlog-relay/config{{- end }}
{{- define "binlog-relay.secretDir" -}}/etc/binlog-relay/secret{{- end }}
{{- define "binlog-relay.runDir" -}}/run/binlog-relay{{- end }}
{{- define "binlog-relay.listenTLSDir" -}}/etc/binlog-relay/tls/listen{{- end }}
{{- define "binlog-relay.upstreamTLSDir" -}}/etc/binlog-relay/tls/upstream{{- end }}
{{- define "binlog-relay.archiveDir" -}}/etc/binlog-relay/archive{{- end }}

{{- define "binlog-relay.listenPort" -}}
{{- dig "listen" "port" 3306 .Values.config | int }}
{{- end }}

{{- define "binlog-relay.metricsPort" -}}
{{- dig "metrics" "port" 9104 .Values.config | int }}
{{- end }}

{{/*
Checks that values.schema.json cannot express; each fails the render with a message.
*/}}
{{- define "binlog-relay.validate" -}}
{{- $c := .Values.config }}
{{- if not (or (dig "upstream" "host" "" $c) (dig "upstream" "hosts" (list) $c)) }}
{{- fail "config.upstream.host is required: the primary to replicate from (or config.upstream.hosts, the candidate primaries)" }}
{{- end }}
{{- if and (dig "upstream" "host" "" $c) (dig "upstream" "hosts" (list) $c) }}
{{- fail "config.upstream: give host (one primary) or hosts (candidate primaries), not both" }}
{{- end }}
{{- if not (dig "metrics" "enabled" true $c) }}
{{- fail "config.metrics.enabled must stay true: the probes use /healthz and /readyz on the metrics port" }}
{{- end }}
{{- if eq (include "binlog-relay.listenPort" .) "0" }}
{{- fail "config.listen.port must not be 0 (any free port) in Kubernetes: the Services need a fixed port" }}
{{- end }}
{{- if eq (include "binlog-relay.metricsPort" .) "0" }}
{{- fail "config.metrics.port must not be 0 (any free port) in Kubernetes: the probes need a fixed port" }}
{{- end }}
{{- $base := int64 $c.server_id }}
{{- $last := add $base (sub (int64 .Values.replicaCount) 1) }}
{{- if gt (int64 $last) 4294967295 }}
{{- fail (printf "config.server_id %d + replicaCount - 1 = %d exceeds 4294967295: pod N uses server_id + N" $base $last) }}
{{- end }}
{{- range $id := (dig "upstream" "ignore_server_ids" list $c) }}
{{- if and (ge (int64 $id) $base) (le (int64 $id) (int64 $last)) }}
{{- fail (printf "config.upstream.ignore_server_ids contains %d, the server_id of one of the relay pods (%d..%d)" (int64 $id) $base $last) }}
{{- end }}
{{- end }}
{{- if .Values.auth.existingSecret }}
{{- if or .Values.auth.upstreamPassword .Values.auth.users }}
{{- fail "auth.upstreamPassword and auth.users are not used with auth.existingSecret: put them into that Secret" }}
{{- end }}
{{- end }}
{{- range $i, $u := .Values.auth.users }}
{{- $hasPassword := not (kindIs "invalid" (index $u "password")) }}
{{- $hasHash := not (kindIs "invalid" (index $u "password_hash")) }}
{{- if eq $hasPassword $hasHash }}
{{- fail (printf "auth.users[%d] (%v): give exactly one of password or password_hash" $i (get $u "name")) }}
{{- end }}
{{- end }}
{{- $mode := dig "upstream" "ssl" "mode" "disabled" $c }}
{{- if and (has $mode (list "verify_ca" "verify_identity")) (not .Values.tls.upstream.secretName) }}
{{- fail (printf "config.upstream.ssl.mode %s needs the CA: set tls.upstream.secretName" $mode) }}
{{- end }}
{{- if and .Values.tls.upstream.clientCert (not .Values.tls.upstream.secretName) }}
{{- fail "tls.upstream.clientCert needs tls.upstream.secretName" }}
{{- end }}
{{- if and (dig "listen" "ssl" "require" false $c) (not .Values.tls.listen.secretName) }}
{{- fail "config.listen.ssl.require needs a certificate: set tls.listen.secretName" }}
{{- end }}
{{- if and (include "binlog-relay.archiveSecrets" .) (not (dig "archive" "url" nil $c)) }}
{{- fail "archive.credentialsSecret, archive.encryptionKeySecret and archive.oldEncryptionKeySecrets are for the archive: set config.archive.url (or leave them empty)" }}
{{- end }}
{{- if and .Values.archive.oldEncryptionKeySecrets (not .Values.archive.encryptionKeySecret.name) }}
{{- fail "archive.oldEncryptionKeySecrets only open what they encrypted: set archive.encryptionKeySecret to the key that encrypts new files" }}
{{- end }}
{{- if and .Values.archive.verify.schedule (not (dig "archive" "url" nil $c)) }}
{{- fail "archive.verify.schedule checks the archive: set config.archive.url (or leave it empty)" }}
{{- end }}
{{- end }}

{{/*
The archive's Secrets as the items of one projected volume (mounted at archiveDir), as YAML
[{name, key, path}]; empty when there are none. The files are named by their role, so the
configuration's paths do not depend on the Secrets' key names.
*/}}
{{- define "binlog-relay.archiveSecrets" -}}
{{- $a := .Values.archive }}
{{- $items := list }}
{{- with $a.credentialsSecret.name }}
{{- $items = append $items (dict "name" . "key" $a.credentialsSecret.accessKeyIdKey "path" "access-key-id" "option" "access_key_id_file") }}
{{- $items = append $items (dict "name" . "key" $a.credentialsSecret.secretAccessKeyKey "path" "secret-access-key" "option" "secret_access_key_file") }}
{{- end }}
{{- with $a.encryptionKeySecret.name }}
{{- $items = append $items (dict "name" . "key" $a.encryptionKeySecret.key "path" "encryption.key" "option" "encryption_key_file") }}
{{- end }}
{{- range $i, $old := $a.oldEncryptionKeySecrets }}
{{- $items = append $items (dict "name" $old.name "key" $old.key "path" (printf "old-encryption-%d.key" $i) "option" "old_encryption_key_files") }}
{{- end }}
{{- if $items }}
{{- toYaml $items }}
{{- end }}
{{- end }}

{{/*
The relay's configuration without server_id and users: .Values.config plus the keys the chart
manages (data_dir, TLS file paths). The init container prepends server_id and appends users.
*/}}
{{- define "binlog-relay.configYaml" -}}
{{- $c := deepCopy .Values.config }}
{{- $_ := unset $c "server_id" }}
{{- $_ := set $c "data_dir" .Values.persistence.mountPath }}
{{- if dig "upstream" "hosts" (list) $c }}
{{- $_ := unset $c.upstream "host" }}
{{- end }}
{{- if .Values.tls.listen.secretName }}
{{- $listen := default dict $c.listen }}
{{- $ssl := default dict $listen.ssl }}
{{- $_ := set $ssl "cert" (printf "%s/tls.crt" (include "binlog-relay.listenTLSDir" .)) }}
{{- $_ := set $ssl "key" (printf "%s/tls.key" (include "binlog-relay.listenTLSDir" .)) }}
{{- $_ := set $listen "ssl" $ssl }}
{{- $_ := set $c "listen" $listen }}
{{- end }}
{{- if .Values.tls.upstream.secretName }}
{{- $upstream := default dict $c.upstream }}
{{- $ssl := default dict $upstream.ssl }}
{{- $_ := set $ssl "ca" (printf "%s/ca.crt" (include "binlog-relay.upstreamTLSDir" .)) }}
{{- if .Values.tls.upstream.clientCert }}
{{- $_ := set $ssl "cert" (printf "%s/tls.crt" (include "binlog-relay.upstreamTLSDir" .)) }}
{{- $_ := set $ssl "key" (printf "%s/tls.key" (include "binlog-relay.upstreamTLSDir" .)) }}
{{- end }}
{{- $_ := set $upstream "ssl" $ssl }}
{{- $_ := set $c "upstream" $upstream }}
{{- end }}
{{- with include "binlog-relay.archiveSecrets" . }}
{{- $archive := default dict $c.archive }}
{{- $old := list }}
{{- range $item := fromYamlArray . }}
{{- $path := printf "%s/%s" (include "binlog-relay.archiveDir" $) $item.path }}
{{- if eq $item.option "old_encryption_key_files" }}
{{- $old = append $old $path }}
{{- else }}
{{- $_ := set $archive $item.option $path }}
{{- end }}
{{- end }}
{{- if $old }}
{{- $_ := set $archive "old_encryption_key_files" $old }}
{{- end }}
{{- $_ := set $c "archive" $archive }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/*
The users file kept in the chart-created Secret: the relay's own `users` list, where a password
is a password_file: the Secret's key of its own, mounted as a file in both containers, so the
password itself never enters the assembled configuration file.
*/}}
{{- define "binlog-relay.usersYaml" -}}
{{- $users := list }}
{{- range $i, $u := .Values.auth.users }}
{{- $user := omit $u "password" }}
{{- if not (kindIs "invalid" (index $u "password")) }}
{{- $_ := set $user "password_file" (printf "%s/%s" (include "binlog-relay.secretDir" $) (include "binlog-relay.userPasswordKey" $i)) }}
{{- end }}
{{- $users = append $users $user }}
{{- end }}
{{- toYaml (dict "users" $users) }}
{{- end }}

{{/*
The chart-created Secret's key (and file name) for the password of auth.users[i].
*/}}
{{- define "binlog-relay.userPasswordKey" -}}user-{{ . }}-password{{- end }}

{{/*
Environment of the relay (and of the init container's check): the upstream password from the
Secret (BINLOG_RELAY_UPSTREAM_PASSWORD overrides upstream.password), then values.extraEnv.
*/}}
{{- define "binlog-relay.relayEnv" -}}
- name: BINLOG_RELAY_UPSTREAM_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "binlog-relay.secretName" . }}
      key: {{ .Values.auth.upstreamPasswordKey }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
TLS Secrets, mounted where the ConfigMap's listen.ssl / upstream.ssl paths point.
*/}}
{{- define "binlog-relay.tlsMounts" -}}
{{- if .Values.tls.listen.secretName }}
- name: tls-listen
  mountPath: {{ include "binlog-relay.listenTLSDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.tls.upstream.secretName }}
- name: tls-upstream
  mountPath: {{ include "binlog-relay.upstreamTLSDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/*
The archive's Secrets (credentials, encryption keys), mounted where the ConfigMap's archive.*_file
paths point: in both containers, as check-config reads them too.
*/}}
{{- define "binlog-relay.archiveMount" -}}
{{- if include "binlog-relay.archiveSecrets" . }}
- name: archive-secrets
  mountPath: {{ include "binlog-relay.archiveDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/*
The volumes of the TLS Secrets and of the archive's Secrets, mounted by tlsMounts and
archiveMount: the relay's pods and the archive check's Jobs read the same files.
*/}}
{{- define "binlog-relay.secretFileVolumes" -}}
{{- with .Values.tls.listen.secretName }}
- name: tls-listen
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- if .Values.tls.upstream.secretName }}
- name: tls-upstream
  secret:
    secretName: {{ .Values.tls.upstream.secretName }}
    defaultMode: 0440
    items:
      - key: {{ .Values.tls.upstream.caKey }}
        path: ca.crt
      {{- if .Values.tls.upstream.clientCert }}
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- end }}
{{- end }}
{{- with include "binlog-relay.archiveSecrets" . }}
- name: archive-secrets
  # The user's Secrets for config.archive, one file per role (none optional: a missing
  # Secret or key keeps the pod from starting).
  projected:
    defaultMode: 0440
    sources:
      {{- range $item := fromYamlArray . }}
      - secret:
          name: {{ $item.name | quote }}
          items:
            - key: {{ $item.key | quote }}
              path: {{ $item.path }}
      {{- end }}
{{- end }}
{{- end }}
