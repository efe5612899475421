"""gpu-webhook: admission policy for GPU workloads on shared Kubernetes clusters."""

__version__ = "0.1.0"
