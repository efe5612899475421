"""What gets installed in a cluster, rendered without kubectl: the kustomize tree (kustomize.py) with the
rules ConfigMap, caBundle and TLS Secret (manifests.py), the webhook configurations' rules and
matchConditions derived from the loaded rules (registration.py), the CRDs (crds.py), the Helm chart's
generated files (helm.py) and the outage runbook (runbook.py). Nothing here imports the commands:
`gpu-webhook manifests` and `python -m webhook.commands.generate` call in, and the server keeps the
registration true in the cluster."""
