{{/* Names and labels. */}}
{{- define "sharedstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sharedstream.fullname" -}}
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

{{- define "sharedstream.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sharedstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component: (dict "root" $ "component" "triggerer"). */}}
{{- define "sharedstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sharedstream.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "sharedstream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sharedstream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sharedstream.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
sharedstream.toml from .Values.config. Not toToml: Helm reads every number of a values
file as a float, and toToml would write `max_in_flight = 10000.0`, which the triggerer
refuses for an integer option. Whole numbers are written as integers here (a float
option takes an integer too); every key is quoted, as librdkafka's dotted keys need.
*/}}
{{- define "sharedstream.toml.value" -}}
{{- if kindIs "float64" . }}
{{- if eq (floor .) . }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else if kindIs "slice" . }}
{{- print "[" }}{{ range $i, $e := . }}{{ if $i }}, {{ end }}{{ include "sharedstream.toml.value" $e }}{{ end }}{{ print "]" }}
{{- else if kindIs "string" . }}
{{- toJson . }}
{{- else if kindIs "map" . }}
{{- fail "error: config: a table inside an array cannot be written to sharedstream.toml; give it as a table of its own" }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* One table and its sub-tables: (dict "path" "" "table" .Values.config). */}}
{{- define "sharedstream.toml.table" -}}
{{- $path := .path }}
{{- $table := .table }}
{{- $nested := list }}
{{- if $path }}
{{ printf "[%s]" $path }}
{{- end }}
{{- range $key, $value := $table }}
{{- if kindIs "map" $value }}
{{- $nested = append $nested $key }}
{{- else if not (kindIs "invalid" $value) }}
{{ toJson $key }} = {{ include "sharedstream.toml.value" $value }}
{{- end }}
{{- end }}
{{- range $key := $nested }}
{{- $sub := ternary (printf "%s.%s" $path (toJson $key)) (toJson $key) (ne $path "") }}
{{ include "sharedstream.toml.table" (dict "path" $sub "table" (get $table $key)) }}
{{- end }}
{{- end }}

{{/* A name part of an environment variable: upper-cased, anything but letters and digits
as "_" (how sharedstream spells a connection id and a librdkafka key there). */}}
{{- define "sharedstream.envPart" -}}
{{- regexReplaceAll "[^A-Za-z0-9]" . "_" | upper }}
{{- end }}

{{/*
The per-key environment variables from existing Secrets (.Values.secrets), named as the
configuration reference says: SHAREDSTREAM__<SECTION>__<KEY>, SHAREDSTREAM__<SECTION>__<ID>__<KEY>
for the sections of tables, and SHAREDSTREAM_CONN_<ID>__<KEY> for Kafka connections.
*/}}
{{- define "sharedstream.secretRef" -}}
{{- if not (and (kindIs "map" .ref) .ref.secretName .ref.key) }}
{{- fail (printf "error: secrets.%s: give {secretName: <existing Secret>, key: <key in it>}" .where) }}
{{- end }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .ref.secretName | quote }}
      key: {{ .ref.key | quote }}
{{- end }}

{{- define "sharedstream.secretEnv" -}}
{{- range $section, $options := .Values.secrets }}
{{- if eq $section "connections" }}
{{- range $id, $keys := $options }}
{{- range $key, $ref := $keys }}
{{ include "sharedstream.secretRef" (dict "name" (printf "SHAREDSTREAM_CONN_%s__%s" (include "sharedstream.envPart" $id) (include "sharedstream.envPart" $key)) "ref" $ref "where" (printf "connections.%s.%s" $id $key)) }}
{{- end }}
{{- end }}
{{- else if has $section (list "airflow" "destinations") }}
{{- range $id, $keys := $options }}
{{- range $key, $ref := $keys }}
{{ include "sharedstream.secretRef" (dict "name" (printf "SHAREDSTREAM__%s__%s__%s" (upper $section) (upper $id) (upper $key)) "ref" $ref "where" (printf "%s.%s.%s" $section $id $key)) }}
{{- end }}
{{- end }}
{{- else }}
{{- range $key, $ref := $options }}
{{ include "sharedstream.secretRef" (dict "name" (printf "SHAREDSTREAM__%s__%s" (upper $section) (upper $key)) "ref" $ref "where" (printf "%s.%s" $section $key)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The environment of every container: health server on the pod's address (so the
console can fetch each triggerer's /status), the pod's name as the triggerer's static
group membership identity (a container restarted in its pod keeps it), the secrets,
then extraEnv. */}}
{{- define "sharedstream.env" -}}
- name: SHAREDSTREAM_CONFIG
  value: /etc/sharedstream/sharedstream.toml
- name: SHAREDSTREAM__TRIGGERER__INSTANCE_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: SHAREDSTREAM__TRIGGERER__HEALTH_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: SHAREDSTREAM__TRIGGERER__HEALTH_PORT
  value: {{ .Values.health.port | int | quote }}
{{- if or .Values.watchers.files .Values.watchers.existingConfigMap }}
- name: PYTHONPATH
  value: {{ .Values.watchers.mountPath | quote }}
{{- end }}
{{- include "sharedstream.secretEnv" . }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The watcher arguments of `sharedstream run`. */}}
{{- define "sharedstream.watcherArgs" -}}
{{- if or .Values.watchers.files .Values.watchers.existingConfigMap }}
- {{ .Values.watchers.mountPath | quote }}
{{- else }}
{{- if not .Values.watchers.paths }}
{{- fail "error: watchers: give watchers.files, watchers.existingConfigMap or watchers.paths (modules in the image)" }}
{{- end }}
{{- range .Values.watchers.paths }}
- {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sharedstream.watchersConfigMap" -}}
{{- default (printf "%s-watchers" (include "sharedstream.fullname" .)) .Values.watchers.existingConfigMap }}
{{- end }}

{{/* terminationGracePeriodSeconds: the shutdown bound plus a margin. */}}
{{- define "sharedstream.gracePeriod" -}}
{{- $triggerer := default dict (get .root.Values.config "triggerer") }}
{{- $bound := default 30 (get $triggerer "shutdown_timeout") }}
{{- add (ceil $bound | int) (.extra | int) }}
{{- end }}

{{/* Volumes and mounts: the config, the watchers, /tmp and the working directory. */}}
{{- define "sharedstream.volumes" -}}
- name: config
  configMap:
    name: {{ include "sharedstream.fullname" . }}-config
- name: tmp
  emptyDir: {}
- name: workdir
{{- if .Values.workdir.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.workdir.existingClaim | quote }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- if or .Values.watchers.files .Values.watchers.existingConfigMap }}
- name: watchers
  configMap:
    name: {{ include "sharedstream.watchersConfigMap" . }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sharedstream.volumeMounts" -}}
- name: config
  mountPath: /etc/sharedstream/sharedstream.toml
  subPath: sharedstream.toml
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: workdir
  mountPath: /var/lib/sharedstream
{{- if or .Values.watchers.files .Values.watchers.existingConfigMap }}
- name: watchers
  mountPath: {{ .Values.watchers.mountPath | quote }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Probes of a process with the health server. */}}
{{- define "sharedstream.probes" -}}
startupProbe:
  httpGet:
    path: /livez
    port: health
  periodSeconds: 5
  failureThreshold: {{ .Values.probes.startupFailureThreshold }}
livenessProbe:
  httpGet:
    path: /livez
    port: health
  periodSeconds: {{ .Values.probes.periodSeconds }}
  timeoutSeconds: 5
  failureThreshold: {{ .Values.probes.livenessFailureThreshold }}
readinessProbe:
  httpGet:
    path: /readyz
    port: health
  periodSeconds: {{ .Values.probes.periodSeconds }}
  timeoutSeconds: 5
  failureThreshold: {{ .Values.probes.readinessFailureThreshold }}
{{- end }}

{{/* One database for every pod: the default SQLite file lives in one pod's workdir. */}}
{{- define "sharedstream.checkDatabase" -}}
{{- $database := default dict (get .Values.config "database") }}
{{- $shared := or (get $database "url") (and .Values.secrets.database .Values.secrets.database.url) }}
{{- $pods := add .Values.triggerer.replicas (ternary .Values.deliverer.replicas 0 .Values.deliverer.enabled) (ternary .Values.console.replicas 0 .Values.console.enabled) }}
{{- if and (not $shared) (gt (int $pods) 1) }}
{{- fail "error: more than one pod needs a database they share: set config.database.url, or secrets.database.url from a Secret (the default SQLite file is private to one pod)" }}
{{- end }}
{{- end }}
