"""gpu-webhook: admission policy for GPU workloads on shared Kubernetes clusters.

Its version is git's, read from the installed metadata: webhook.version.
"""
