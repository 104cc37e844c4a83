{{/* The release's name for every object: <release>-<part>. */}}
{{- define "tts-queue.name" -}}
{{- printf "%s-%s" .root.Release.Name .part | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tts-queue.labels" -}}
app.kubernetes.io/name: tts-queue
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .part }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "tts-queue.selector" -}}
app.kubernetes.io/name: tts-queue
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .part }}
{{- end -}}

{{/* The broker every process uses: the chart's Redis, or redis.url. */}}
{{- define "tts-queue.redisUrl" -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://%s-redis:6379/0" .Release.Name -}}
{{- else -}}
{{- required "redis.url is required when redis.enabled is false" .Values.redis.url -}}
{{- end -}}
{{- end -}}

{{- define "tts-queue.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" .Release.Name) -}}
{{- end -}}

{{/* The settings every tts-queue container gets, as in docker-compose.yml's x-tts environment. */}}
{{- define "tts-queue.env" -}}
- name: TTS_REDIS_URL
  value: {{ include "tts-queue.redisUrl" . | quote }}
- name: TTS_DATA_DIR
  value: /data
- name: TTS_HOST
  value: "0.0.0.0"
{{- range $name, $value := .Values.settings }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- range $name := list "TTS_DATABASE_URL" "AWS_ACCESS_KEY_ID" "AWS_SECRET_ACCESS_KEY" "TTS_WEBHOOK_SECRET" }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "tts-queue.secretName" $ }}
      key: {{ $name }}
      optional: true
{{- end }}
{{- end -}}

{{- define "tts-queue.image" -}}
{{- printf "%s:%s" .root.Values.image.repository (ternary .root.Values.image.gpuTag .root.Values.image.tag (eq .pool "gpu")) -}}
{{- end -}}
