{{/*
The Deployment, the headless metrics Service and the PodDisruptionBudget of a process
with the health server (the triggerer, the deliverer):
(dict "root" $ "component" "triggerer" "values" .Values.triggerer "args" (list "run" ...)).
*/}}
{{- define "sharedstream.process" -}}
{{- $root := .root }}
{{- $c := .component }}
{{- $v := .values }}
{{- $selector := include "sharedstream.selectorLabels" (dict "root" $root "component" $c) }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "sharedstream.fullname" $root }}-{{ $c }}
  labels:
    {{- include "sharedstream.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $c }}
spec:
  replicas: {{ $v.replicas }}
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "sharedstream.labels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ $c }}
      annotations:
        # A new configuration rolls the pods.
        checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      {{- include "sharedstream.podSpec" $root | nindent 6 }}
      # Longer than [triggerer] shutdown_timeout: SIGTERM commits what is in flight.
      terminationGracePeriodSeconds: {{ include "sharedstream.gracePeriod" (dict "root" $root "extra" $v.terminationGraceExtraSeconds) }}
      containers:
        - name: {{ $c }}
          image: {{ include "sharedstream.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          workingDir: /var/lib/sharedstream
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            {{- include "sharedstream.env" $root | nindent 12 }}
          ports:
            - name: health
              containerPort: {{ $root.Values.health.port }}
          {{- include "sharedstream.probes" $root | nindent 10 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "sharedstream.volumeMounts" $root | nindent 12 }}
      volumes:
        {{- include "sharedstream.volumes" $root | nindent 8 }}
      {{- include "sharedstream.placement" $v | nindent 6 }}
---
# /metrics of every {{ $c }} pod, the ServiceMonitor's target.
apiVersion: v1
kind: Service
metadata:
  name: {{ include "sharedstream.fullname" $root }}-{{ $c }}
  labels:
    {{- include "sharedstream.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $c }}
    sharedstream.io/metrics: "true"
spec:
  clusterIP: None
  selector:
    {{- $selector | nindent 4 }}
  ports:
    - name: health
      port: {{ $root.Values.health.port }}
      targetPort: health
{{- if and $v.pdb.enabled (or (eq $c "triggerer") (gt (int $v.replicas) 1)) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "sharedstream.fullname" $root }}-{{ $c }}
  labels:
    {{- include "sharedstream.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $c }}
spec:
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
{{- end }}
{{- end }}

{{/* What every pod spec shares: the service account, pull secrets, the pod's security context. */}}
{{- define "sharedstream.podSpec" -}}
serviceAccountName: {{ include "sharedstream.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automount }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . | quote }}
  {{- end }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* nodeSelector, tolerations and affinity of one component's values. */}}
{{- define "sharedstream.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
