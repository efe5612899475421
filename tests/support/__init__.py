"""What the tests and the benchmarks (bench/) share: one package, imported by both.

- `server`: gpu-webhook's server in process (`start_server`, `LiveServer`), a client that trusts
  the test CA (`client_ssl`), and waits on state a test can observe.
- `reviews`: AdmissionReviews shaped like the apiserver's (`make_review`, `review`), small sample
  pods (`gpu_pod`, `cpu_pod`) and realistic workloads (`pod`, `job`, `pytorch_job`, `heavy_pod`).
- `apiserver`: the same objects as a kube-apiserver sends them once it has defaulted them
  (managedFields, the built-in admission plugins' edits), and the tenant Namespace.
- `manifests`: generated audit inputs with known answers.
- `hostile`: malformed bodies and misbehaving clients, and the rule that judges the answers.
- `attacks`, `faults`: the harnesses of the tenant attacks and of faults under load (the tests
  run them at CI size, `python -m bench.attacks` and `bench.faults` at full size).
- `envtest`: a throwaway etcd + kube-apiserver on 127.0.0.1.
- `kubestub`, `apistub`: stand-in Kubernetes APIs (faults on cue, and the fast loop).

The names most tests need are re-exported here: `from tests.support import gpu_pod, start_server`.
"""

from tests.support.reviews import cpu_pod, gpu_pod, make_review
from tests.support.server import (
    ADDS_A_GPU_INIT_CONTAINER,
    EXAMPLES,
    REPO,
    RULES,
    SITE_RULE,
    HeldBodies,
    LiveServer,
    StaticNamespaces,
    client_ssl,
    free_port,
    load_rule_text,
    refuses_connections,
    start_server,
    wait_for,
    wait_ready,
)

__all__ = [
    "ADDS_A_GPU_INIT_CONTAINER",
    "EXAMPLES",
    "REPO",
    "RULES",
    "SITE_RULE",
    "HeldBodies",
    "LiveServer",
    "StaticNamespaces",
    "client_ssl",
    "cpu_pod",
    "free_port",
    "gpu_pod",
    "load_rule_text",
    "make_review",
    "refuses_connections",
    "start_server",
    "wait_for",
    "wait_ready",
]
