{{/*
Names, labels, images and wiring shared by every template.
Object names are "<fullname>-<component>"; fullname is cut to 52 characters so that the longest
suffix ("-controller", 11 characters) still fits the 63-character DNS label limit.
*/}}

{{- define "swarmscope.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "swarmscope.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "swarmscope.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades (never add version-like values here). */}}
{{- define "swarmscope.selectorLabels" -}}
app.kubernetes.io/name: {{ include "swarmscope.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Full labels of an object of one component: call with (dict "ctx" $ "component" "probes"). */}}
{{- define "swarmscope.labels" -}}
helm.sh/chart: {{ include "swarmscope.chart" .ctx }}
{{ include "swarmscope.selectorLabels" . }}
app.kubernetes.io/part-of: swarmscope
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The one image of all roles; a digest wins over a tag. */}}
{{- define "swarmscope.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* ServiceAccount name of a role: call with (dict "ctx" $ "role" "controller"). */}}
{{- define "swarmscope.serviceAccountName" -}}
{{- if .ctx.Values.rbac.create -}}
{{- printf "%s-%s" (include "swarmscope.fullname" .ctx) .role -}}
{{- else -}}
{{- default "default" (get .ctx.Values.serviceAccounts .role) -}}
{{- end -}}
{{- end -}}

{{- define "swarmscope.secretName" -}}
{{- default (printf "%s-token" (include "swarmscope.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/* The Secret of the Locust master's key pair (master.key: only the controller mounts it;
     master.crt: its public half, the workers' env). */}}
{{- define "swarmscope.masterKeySecret" -}}
{{- default (printf "%s-master-key" (include "swarmscope.fullname" .)) .Values.auth.masterKeySecret -}}
{{- end -}}

{{- define "swarmscope.scenarioConfigMap" -}}
{{- default (printf "%s-scenario" (include "swarmscope.fullname" .)) .Values.scenario.existingConfigMap -}}
{{- end -}}

{{/* In-cluster DNS name of the controller Service. */}}
{{- define "swarmscope.controllerHost" -}}
{{- printf "%s-controller.%s.svc" (include "swarmscope.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* In-cluster DNS name of the relays' Service. */}}
{{- define "swarmscope.relaysHost" -}}
{{- printf "%s-relays.%s.svc" (include "swarmscope.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* What probes dial, in turn: the relays (when on), then the controller's fleet port. */}}
{{- define "swarmscope.probeUpstreams" -}}
{{- $ctl := printf "%s:%v" (include "swarmscope.controllerHost" .) .Values.controller.ports.grpc -}}
{{- if .Values.relays.enabled -}}
{{- printf "%s:%v,%s" (include "swarmscope.relaysHost" .) .Values.relays.port $ctl -}}
{{- else -}}
{{- $ctl -}}
{{- end -}}
{{- end -}}

{{/* The relays' mTLS Secret (server towards probes, client towards the controller). */}}
{{- define "swarmscope.relaysTlsSecret" -}}
{{- default (printf "%s-tls-relays" (include "swarmscope.fullname" .)) .Values.relays.tlsSecret -}}
{{- end -}}

{{/* OTLP endpoint the controller exports to (bundled Jaeger or otel.endpoint). */}}
{{- define "swarmscope.otelEndpoint" -}}
{{- if .Values.jaeger.enabled -}}
{{- $port := ternary 4317 4318 (eq .Values.otel.protocol "grpc") -}}
{{- printf "http://%s-jaeger.%s.svc:%v" (include "swarmscope.fullname" .) .Release.Namespace $port -}}
{{- else -}}
{{- .Values.otel.endpoint -}}
{{- end -}}
{{- end -}}

{{/* OTLP export of a probe's or worker's own spans: the chart's Jaeger or otel.endpoint, the
same as the controller's. With tracing off nothing is set (not OTEL_SDK_DISABLED): their spans
still travel back to the controller with each window's results and land in trace.json. */}}
{{- define "swarmscope.otlpEnv" -}}
{{- if .Values.tracing.enabled }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ include "swarmscope.otelEndpoint" . | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .Values.otel.protocol | quote }}
{{- end }}
{{- end -}}

{{/* NODE_NAME from the downward API: workers and probes identify their node by it. */}}
{{- define "swarmscope.nodeNameEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{/* The pod's identity on every span it makes (OpenTelemetry k8s.* resource attributes), so a
trace says which pod each span came from. Call with (dict "container" NAME). */}}
{{- define "swarmscope.podResourceEnv" -}}
- name: K8S_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: K8S_POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: K8S_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: OTEL_RESOURCE_ATTRIBUTES
  value: "k8s.namespace.name=$(K8S_POD_NAMESPACE),k8s.pod.name=$(K8S_POD_NAME),k8s.node.name=$(K8S_NODE_NAME),k8s.container.name={{ .container }}"
{{- end -}}

{{/* Container security context of the unprivileged roles (controller, workers). */}}
{{- define "swarmscope.restrictedSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* mTLS Secrets of the fleet: (dict "ctx" $ "role" "controller"|"probes"). */}}
{{- define "swarmscope.tlsSecret" -}}
{{- $t := .ctx.Values.tls -}}
{{- if eq .role "controller" -}}
{{- default (printf "%s-tls-controller" (include "swarmscope.fullname" .ctx)) $t.controllerSecret -}}
{{- else -}}
{{- default (printf "%s-tls-probes" (include "swarmscope.fullname" .ctx)) $t.probesSecret -}}
{{- end -}}
{{- end -}}

{{/* Selector of one component of this release, for NetworkPolicy peers. */}}
{{- define "swarmscope.peer" -}}
podSelector:
  matchLabels:
    {{- include "swarmscope.selectorLabels" . | nindent 4 }}
{{- end -}}

{{/* Secrets each role gets (docs/security.md), as env: (dict "ctx" $ "role" "controller"|"workers"|"probes").
     controller: POD_IP (bind address), worker token, master key file, web password file, fleet
     TLS files; workers: the worker token and the master's public key only; probes: their TLS
     client files (their node's key is a file, made from the probe token by an init container). */}}
{{- define "swarmscope.securityEnv" -}}
{{- $v := .ctx.Values -}}
{{- $tls := "/var/run/swarmscope-tls" -}}
{{- if eq .role "controller" }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: SWARMSCOPE_WEB_PASSWORD_FILE
  value: /var/run/swarmscope-web/{{ $v.auth.webPasswordKey }}
{{- end }}
{{- if ne .role "probes" }}
- name: SWARMSCOPE_WORKER_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "swarmscope.secretName" .ctx }}
      key: {{ $v.auth.workerTokenKey }}
{{- end }}
{{- if eq .role "controller" }}
- name: SWARMSCOPE_MASTER_KEY_FILE
  value: /var/run/swarmscope-master/master.key
{{- else if eq .role "workers" }}
# The master's public key only: a worker can check the master, not act as it.
- name: SWARMSCOPE_MASTER_PUBLIC_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "swarmscope.masterKeySecret" .ctx }}
      key: master.crt
{{- end }}
{{- if $v.tls.enabled }}
{{- if eq .role "controller" }}
- name: SWARMSCOPE_TLS_CERT
  value: {{ $tls }}/tls.crt
- name: SWARMSCOPE_TLS_KEY
  value: {{ $tls }}/tls.key
- name: SWARMSCOPE_TLS_CLIENT_CA
  value: {{ $tls }}/ca.crt
{{- else if eq .role "probes" }}
- name: SWARMSCOPE_TLS_CA
  value: {{ $tls }}/ca.crt
- name: SWARMSCOPE_TLS_CERT
  value: {{ $tls }}/tls.crt
- name: SWARMSCOPE_TLS_KEY
  value: {{ $tls }}/tls.key
{{- end }}
{{- end }}
{{- end -}}

{{- define "swarmscope.securityMounts" -}}
{{- if eq .role "controller" }}
- name: web-password
  mountPath: /var/run/swarmscope-web
  readOnly: true
- name: master-key
  mountPath: /var/run/swarmscope-master
  readOnly: true
{{- end }}
{{- if .ctx.Values.tls.enabled }}
- name: fleet-tls
  mountPath: /var/run/swarmscope-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "swarmscope.securityVolumes" -}}
{{- if eq .role "controller" }}
- name: web-password
  secret:
    secretName: {{ include "swarmscope.secretName" .ctx }}
    # 0440 with the pod's fsGroup: the controller runs as uid 10001, not root.
    defaultMode: 0440
    items:
      - key: {{ .ctx.Values.auth.webPasswordKey }}
        path: {{ .ctx.Values.auth.webPasswordKey }}
# The Locust master's secret key: in the controller pod only.
- name: master-key
  secret:
    secretName: {{ include "swarmscope.masterKeySecret" .ctx }}
    defaultMode: 0440
    items:
      - key: master.key
        path: master.key
{{- end }}
{{- if .ctx.Values.tls.enabled }}
- name: fleet-tls
  secret:
    secretName: {{ include "swarmscope.tlsSecret" . }}
    defaultMode: {{ ternary "0440" "0400" (eq .role "controller") }}
{{- end }}
{{- end -}}

{{/* "true" when the workers run the kill-pod fault (the ingress flood's target worker deletes
     the pod): they then get the fault Role and a mounted token; "" otherwise. */}}
{{- define "swarmscope.workersKillPods" -}}
{{- if and .Values.rbac.create (eq (toString (include "swarmscope.scenarioConfig" . | fromJson).fault) "kill-pod") -}}true{{- end -}}
{{- end -}}

{{/* "true" when the scenario's tracer under test is Inspektor Gadget in the cluster (ig-cluster). */}}
{{- define "swarmscope.igCluster" -}}
{{- if eq (toString (include "swarmscope.scenarioConfig" . | fromJson).tracer) "ig-cluster" -}}true{{- end -}}
{{- end -}}

{{/* The node's kernel headers for BCC's compile step (probes, the neighbor worker): mounts. */}}
{{- define "swarmscope.headerMounts" -}}
- name: modules
  mountPath: /lib/modules
  readOnly: true
- name: usr-src
  mountPath: /usr/src
  readOnly: true
{{- end -}}

{{/* ... and their volumes. */}}
{{- define "swarmscope.headerVolumes" -}}
- name: modules
  hostPath:
    path: /lib/modules
    type: Directory
# Some distributions ship headers elsewhere or not at all: no type check on /usr/src.
- name: usr-src
  hostPath:
    path: /usr/src
{{- end -}}
