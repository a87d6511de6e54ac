{{/* Labels every object carries: the kustomize install's part-of label, plus Helm's own. */}}
{{- define "nimbix-burst.labels" -}}
app.kubernetes.io/part-of: nimbix-burst
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "nimbix-burst.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}

{{/* The webhook's settings as the ConfigMap holds them (computed defaults filled in). */}}
{{- define "nimbix-burst.webhookEnv" -}}
{{- $env := deepCopy .Values.webhook.env -}}
{{- if not $env.WEBHOOK_PEER_SERVER_NAME -}}
{{- $_ := set $env "WEBHOOK_PEER_SERVER_NAME" (printf "nimbix-burst-webhook.%s.svc" .Release.Namespace) -}}
{{- end -}}
{{- $_ := set $env "WEBHOOK_GPU_RESOURCES" (join "," .Values.webhook.gpuResources) -}}
{{- $_ := set $env "WEBHOOK_GATEWAY_URL" (include "nimbix-burst.gatewayURL" .) -}}
{{- $_ := set $env "WEBHOOK_GATEWAY_CA_FILE" (include "nimbix-burst.gatewayCAFile" .) -}}
{{- if .Values.webhook.clientCASecret -}}
{{- $_ := set $env "WEBHOOK_CLIENT_CA_FILE" "/etc/nimbix-burst/client-ca/ca.crt" -}}
{{- end -}}
{{- if not .Values.certManager.enabled -}}
{{- /* The replicas trust the CA the API server is given (a Secret you make may carry no ca.crt). */ -}}
{{- $_ := set $env "WEBHOOK_PEER_CA_FILE" (printf "%s/ca.crt" (include "nimbix-burst.peerCADir" .)) -}}
{{- end -}}
{{- toJson $env -}}
{{- end -}}

{{/* Without cert-manager: where tls.caBundle is mounted for the replicas (WEBHOOK_PEER_CA_FILE). */}}
{{- define "nimbix-burst.peerCADir" -}}
/etc/nimbix-burst/peer-ca
{{- end -}}

{{/* Its ConfigMap's name, with a content hash (as for the settings): a new CA rolls the webhook. */}}
{{- define "nimbix-burst.peerCAConfigMapName" -}}
{{- $hash := dict "data" (dict "ca.crt" .Values.tls.caBundle) "kind" "ConfigMap" "name" "" | toJson | sha256sum | trunc 10 -}}
{{- $hash = $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" -}}
{{- printf "nimbix-burst-webhook-ca-%s" $hash -}}
{{- end -}}

{{/* The ConfigMap's name: kustomize's configMapGenerator name with its content hash (kustomize
     api/hasher: sha256 of {"data","kind","name"} as JSON, 10 hex digits, some digits swapped for
     letters; its lookup of "metadata/name" finds nothing, so the name it hashes is always ""). The same name as `kubectl apply -k deploy/` gives it, and a
     changed setting rolls the Deployment, as it does there. */}}
{{- define "nimbix-burst.webhookConfigMapName" -}}
{{- $data := include "nimbix-burst.webhookEnv" . | fromJson -}}
{{- $hash := dict "data" $data "kind" "ConfigMap" "name" "" | toJson | sha256sum | trunc 10 -}}
{{- $hash = $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" -}}
{{- printf "nimbix-burst-webhook-%s" $hash -}}
{{- end -}}

{{/* The matchConditions expression for the GPU resource names (the kustomize install's text). */}}
{{- define "nimbix-burst.gpuCondition" -}}
{{- $tests := list -}}
{{- range .Values.webhook.gpuResources -}}
{{- $tests = append $tests (printf "'%s' in c.resources.limits" .) -}}
{{- end -}}
{{- $any := join " || " $tests -}}
{{- $one := printf "  has(c.resources) && has(c.resources.limits) &&\n  (%s)))" $any -}}
{{- /* The blank line after "exists(c," is what kustomize makes of the folded scalar in deploy/. */ -}}
{{- /* A pod that carries what only nimbix-burst writes reaches the webhook too, GPUs or not: a copy of a
burst pod asks for none, and its marks must be cleared (docs/decision.md, "What a pod cannot say"). */ -}}
{{- $marks := "(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('nimbix-burst.io/'))) || (has(object.metadata.labels) && 'nimbix-burst.io/decision' in object.metadata.labels) || object.spec.containers.exists(c, has(c.env) && c.env.exists(e, e.name == 'REMOTE' || e.name.startsWith('NIMBIX_BURST_')))" -}}
{{- printf "(has(object.spec.containers) && object.spec.containers.exists(c,\n\n%s\n|| (has(object.spec.initContainers) && object.spec.initContainers.exists(c,\n\n%s\n|| %s" $one $one $marks -}}
{{- end -}}


{{/* The GPU model mapping file: the values' mapping, or (empty) the shipped file as it is. */}}
{{- define "nimbix-burst.gpuModelsFile" -}}
{{- if .Values.webhook.gpuModels -}}
{{- toYaml .Values.webhook.gpuModels -}}
{{- else -}}
{{- .Files.Get "files/gpu-models.yaml" -}}
{{- end -}}
{{- end -}}

{{/* Its ConfigMap's name, with kustomize's content hash (as for the settings above). */}}
{{- define "nimbix-burst.gpuModelsConfigMapName" -}}
{{- $data := dict "gpu-models.yaml" (include "nimbix-burst.gpuModelsFile" .) -}}
{{- $hash := dict "data" $data "kind" "ConfigMap" "name" "" | toJson | sha256sum | trunc 10 -}}
{{- $hash = $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" -}}
{{- printf "nimbix-burst-gpu-models-%s" $hash -}}
{{- end -}}

{{/* The gateway's URL as burst pods are given it: the setting when set, else the gateway's Service in
     the release namespace (by its fixed address when gateway.clusterIP is set); none without a gateway. */}}
{{- define "nimbix-burst.gatewayURL" -}}
{{- $url := .Values.webhook.env.WEBHOOK_GATEWAY_URL -}}
{{- if not .Values.gateway.enabled -}}
{{- if $url -}}
{{- fail (printf "webhook.env.WEBHOOK_GATEWAY_URL: %s is set but gateway.enabled is false: leave it empty (no gateway: every namespace pays with its own jarvice-credentials) or enable the gateway" $url) -}}
{{- end -}}
{{- else if $url -}}
{{- $url -}}
{{- else -}}
{{- printf "https://%s" (.Values.gateway.clusterIP | default (printf "nimbix-burst-gateway.%s.svc" .Release.Namespace)) -}}
{{- end -}}
{{- end -}}

{{/* The CA burst pods trust the gateway by (it signs the gateway's and the webhook's certificates):
     ca.crt in the webhook's serving Secret, which cert-manager writes; without cert-manager,
     tls.caBundle as the webhook mounts it for its peers. */}}
{{- define "nimbix-burst.gatewayCAFile" -}}
{{- if .Values.webhook.env.WEBHOOK_GATEWAY_CA_FILE -}}
{{- .Values.webhook.env.WEBHOOK_GATEWAY_CA_FILE -}}
{{- else if .Values.certManager.enabled -}}
{{- printf "%s/ca.crt" .Values.webhook.env.WEBHOOK_TLS_DIR -}}
{{- else -}}
{{- printf "%s/ca.crt" (include "nimbix-burst.peerCADir" .) -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the gateway's serving certificate: the one cert-manager writes, or yours. */}}
{{- define "nimbix-burst.gatewayTLSSecretName" -}}
{{- if .Values.gateway.tlsSecretName -}}
{{- .Values.gateway.tlsSecretName -}}
{{- else if .Values.certManager.enabled -}}
nimbix-burst-gateway-tls
{{- else -}}
{{- include "nimbix-burst.checkCABundle" . -}}
{{- fail (printf "gateway.tlsSecretName: without cert-manager (certManager.enabled=false) the gateway needs a serving certificate: create a Secret (tls.crt, tls.key) for nimbix-burst-gateway.%s.svc signed by the CA in tls.caBundle and name it here, or set gateway.enabled=false (docs/helm.md, TLS)" .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* Without cert-manager: tls.caBundle must be the PEM of a CA (it signs both serving certificates).
     Renders nothing; fails saying what to give. */}}
{{- define "nimbix-burst.checkCABundle" -}}
{{- if not .Values.tls.caBundle -}}
{{- fail "tls.caBundle: without cert-manager (certManager.enabled=false), give the PEM of the CA that signed the certificate in tls.secretName" -}}
{{- end -}}
{{- if not (contains "-----BEGIN CERTIFICATE-----" .Values.tls.caBundle) -}}
{{- fail "tls.caBundle: not a PEM certificate (-----BEGIN CERTIFICATE-----): give the CA file itself, --set-file tls.caBundle=ca.crt" -}}
{{- end -}}
{{- end -}}
