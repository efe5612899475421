{{/*
Helpers of the hand-written and the generated templates (templates/generated/, from
`python -m webhook.commands.generate helm`). Names of objects are fixed, as `gpu-webhook manifests` renders
them: the RBAC names the webhook configurations by name, and one gpu-webhook serves a cluster.
*/}}

{{/* The image: a digest pins it; else the tag, else the chart's appVersion. */}}
{{- define "gpu-webhook.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* failurePolicy of all four webhook entries: given, else Ignore in audit mode and Fail in enforce mode. */}}
{{- define "gpu-webhook.failurePolicy" -}}
{{- if .Values.failurePolicy -}}
{{ .Values.failurePolicy }}
{{- else if eq .Values.mode "enforce" -}}
Fail
{{- else -}}
Ignore
{{- end -}}
{{- end -}}

{{/* The Secret the server reads its serving certificate from. */}}
{{- define "gpu-webhook.tlsSecret" -}}
{{- if eq .Values.certificates.source "secret" -}}
{{ .Values.certificates.secret.name }}
{{- else -}}
gpu-webhook-tls
{{- end -}}
{{- end -}}

{{/* Namespaces the apiserver never sends: kube-system and the webhook's own (no lock-out), then excludedNamespaces. */}}
{{- define "gpu-webhook.excludedNamespaces" -}}
{{- toYaml (concat (list "kube-system" .Release.Namespace) .Values.excludedNamespaces | uniq) -}}
{{- end -}}

{{/* cert-manager's cainjector writes the caBundle of both webhook configurations. */}}
{{- define "gpu-webhook.webhookAnnotations" -}}
{{- if eq .Values.certificates.source "certManager" -}}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/gpu-webhook-serving
{{- end -}}
{{- end -}}

{{/* The caBundle of each webhook entry, unless cert-manager injects it. */}}
{{- define "gpu-webhook.caBundle" -}}
{{- if ne .Values.certificates.source "certManager" -}}
caBundle: {{ include "gpu-webhook.caPEM" . | b64enc }}
{{- end -}}
{{- end -}}

{{- define "gpu-webhook.caPEM" -}}
{{- if eq .Values.certificates.source "secret" -}}
{{ .Values.certificates.secret.caBundle }}
{{- else -}}
{{ (include "gpu-webhook.selfSigned" . | fromYaml).ca }}
{{- end -}}
{{- end -}}

{{/*
The self-signed CA and serving certificate, made once per render and kept across upgrades: the
Secret already in the cluster is reused (lookup), so `helm upgrade` never changes the caBundle.
`helm template` has no cluster and makes a new pair each time. The pair is cached in the render's
root context so that the Secret and both webhook configurations carry the same CA.
*/}}
{{- define "gpu-webhook.selfSigned" -}}
{{- if not (hasKey .Release "gpuWebhookTLS") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace "gpu-webhook-tls" -}}
{{- $data := dict -}}
{{- if and $existing $existing.data -}}
{{- $data = $existing.data -}}
{{- end -}}
{{- if and (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") -}}
{{- $_ := set .Release "gpuWebhookTLS" (dict "ca" (index $data "ca.crt" | b64dec) "cert" (index $data "tls.crt" | b64dec) "key" (index $data "tls.key" | b64dec)) -}}
{{- else -}}
{{- $self := .Values.certificates.selfSigned -}}
{{- $ca := genCA "gpu-webhook CA" (int $self.caDays) -}}
{{- $service := printf "gpu-webhook.%s" .Release.Namespace -}}
{{- $names := concat (list "gpu-webhook" $service (printf "%s.svc" $service) (printf "%s.svc.cluster.local" $service)) $self.dnsNames -}}
{{- $cert := genSignedCert (printf "%s.svc" $service) $self.ipAddresses $names (int $self.days) $ca -}}
{{- $_ := set .Release "gpuWebhookTLS" (dict "ca" $ca.Cert "cert" $cert.Cert "key" $cert.Key) -}}
{{- end -}}
{{- end -}}
{{- toYaml .Release.gpuWebhookTLS -}}
{{- end -}}

{{/* What would install something that cannot work: refused with the reason and the fix. */}}
{{- define "gpu-webhook.checks" -}}
{{- if ne .Release.Namespace "gpu-webhook" -}}
{{- fail (printf "install gpu-webhook into the namespace gpu-webhook (helm install gpu-webhook CHART -n gpu-webhook --create-namespace), not %s: its RBAC, certificates and `gpu-webhook manifests` name that namespace" .Release.Namespace) -}}
{{- end -}}
{{- if and (eq (include "gpu-webhook.failurePolicy" .) "Fail") (eq .Values.image.repository "registry.example.com/gpu-webhook") (not .Values.image.tag) (not .Values.image.digest) -}}
{{- fail "failurePolicy Fail with the placeholder image registry.example.com/gpu-webhook: it cannot be pulled, no replica would answer, and the apiserver would refuse every pod create outside the exempt namespaces. Set image.repository and image.digest (or image.tag) to the image you pushed, or start with mode=audit" -}}
{{- end -}}
{{- if and (eq .Values.certificates.source "secret") (not .Values.certificates.secret.caBundle) -}}
{{- fail "certificates.source=secret needs certificates.secret.caBundle: the PEM of the CA that signed the Secret's tls.crt (the apiserver checks the webhook's certificate with it)" -}}
{{- end -}}
{{- end -}}
