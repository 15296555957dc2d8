{{- define "elastore.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- /*
The namespaces whose ElasticPolicies the release serves, as a JSON list; [] means the whole
cluster, and only watchAllNamespaces gives that. Default: the release's own namespace.
*/ -}}
{{- define "elastore.watched" -}}
{{- if .Values.watchAllNamespaces -}}
[]
{{- else if .Values.watchNamespaces -}}
{{ toJson .Values.watchNamespaces }}
{{- else -}}
{{ toJson (list .Release.Namespace) }}
{{- end -}}
{{- end -}}

{{- /* the ClusterKopfPeering the replicas share: one per release by default */ -}}
{{- define "elastore.peering" -}}
{{- default (include "elastore.fullname" .) .Values.peering.name -}}
{{- end -}}

{{- define "elastore.serviceAccountName" -}}
{{- default (include "elastore.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "elastore.labels" -}}
{{ include "elastore.selector" . }}
{{ include "elastore.commonLabels" . }}
{{- end -}}

{{- define "elastore.commonLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "elastore.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}


{{- /*
The node agent (agent-*.yaml). Its pods must never match the operator's selector (name +
instance: the Deployment's is immutable, so it cannot gain a component label): they carry
another app.kubernetes.io/name, <chart>-agent, and component: agent; part-of ties them to
the release's application. The operator's pods lack component: agent, so the agent's
selector does not match them either.
*/ -}}
{{- define "elastore.agent.fullname" -}}
{{- printf "%s-agent" (include "elastore.fullname" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}

{{- define "elastore.agent.serviceAccountName" -}}
{{- default (include "elastore.agent.fullname" .) .Values.agent.serviceAccount.name -}}
{{- end -}}

{{- define "elastore.agent.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "elastore.agent.labels" -}}
{{ include "elastore.agent.selector" . }}
app.kubernetes.io/part-of: {{ .Chart.Name }}
{{ include "elastore.commonLabels" . }}
{{- end -}}

{{- /*
Pod annotations: a map with every value made a string (an annotation's value is one,
whatever the values file's YAML made of it: true, 1).
*/ -}}
{{- define "elastore.annotations" -}}
{{- $out := dict -}}
{{- range $k, $v := . -}}
{{- $_ := set $out $k (toString $v) -}}
{{- end -}}
{{ toYaml $out }}
{{- end -}}

{{- /*
extraEnv: (list KEY ENV RESERVED), ENV a container's env list from the values at KEY, each
entry with a name, none of them RESERVED (a variable the chart sets itself); rendered as is.
*/ -}}
{{- define "elastore.extraEnv" -}}
{{- $key := index . 0 -}}
{{- $reserved := index . 2 -}}
{{- range (index . 1) -}}
{{- if or (not (kindIs "map" .)) (not .name) -}}
{{- fail (printf "%s: every entry needs a name, as in a container's env ({name: ..., value: ...}); got %v" $key .) -}}
{{- end -}}
{{- if eq (toString .name) $reserved -}}
{{- fail (printf "%s: %s is set by the chart, not here" $key .name) -}}
{{- end -}}
{{- end -}}
{{ toYaml (index . 1) }}
{{- end -}}
