"""What gets installed in a cluster: the kustomize tree rendered without kubectl (kustomize.py) and the
webhook configurations' rules and matchConditions derived from the loaded rules (registration.py).
`gpu-webhook manifests` renders both; the server keeps the registration true in the cluster."""
