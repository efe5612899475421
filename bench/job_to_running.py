"""What gpu-webhook costs a workload in a whole cluster: `python -m bench.job_to_running`.

The cluster of tests/support/cluster.py (apiserver, controller-manager, scheduler, hollow GPU
nodes, Kueue v0.13.1) with gpu-webhook installed as tests/cluster installs it (rendered manifests,
`serve` as its ServiceAccount). One round: a tenant creates a Kueue-queued GPU Job (`--pods` pods,
one NVIDIA GPU each) and the clock runs until all its pods are Running: the Job's create, Kueue's
webhooks, suspend, admission and resume, the Job controller's pod creates, scheduling, the hollow
kubelets. Then the Job is deleted and its pods and Workload waited out.

Rounds alternate, in ABBA order (`--rounds` pairs): `with` (the rendered webhook configurations
installed) and `without` (both deleted, and a dry-run probe seen to no longer reach the server),
in the same cluster, the same namespace and the same Job, which carries what the webhook would
add (queue label, GPU toleration, priority label) so that both flows schedule the same pods.
Prints the median of each and their ratio (goal <= 1.05), writes bench/results/tmp/job-to-running-<time>.json.

Needs KUBEBUILDER_ASSETS and GPU_WEBHOOK_CLUSTER (as tests/cluster); heavy: run it under `nice`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.apiserver_path import RESULTS, run_on_envtest, save
from tests.cluster.conftest import GpuWebhook, Tenant, install_gpu_webhook, install_queues, make_tenant
from tests.cluster.workloads import PRIORITY_LABEL, QUEUE_LABEL, job, pods
from tests.support.cluster import Cluster, cluster_dir, retry
from tests.support.envtest import EnvTest

NAMESPACE = "bench-team"
WEBHOOKS = (
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "gpu-webhook-mutating"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "gpu-webhook-validating"),
)


def bench_job(name: str, pods_count: int, queue: str) -> dict[str, Any]:
    body = job(name, gpus=1, pods=pods_count, labels={QUEUE_LABEL: queue, PRIORITY_LABEL: "training-batch"})
    body["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    body["spec"]["template"]["spec"]["priorityClassName"] = "gpu-batch"
    return body


def _probe_seen(server: GpuWebhook, env: EnvTest, tenant: Tenant) -> bool:
    before = server.requests()
    env.dry_run_create({**bench_job("probe", 1, tenant.queue), "metadata": {"name": "probe", "namespace": NAMESPACE}})
    return server.requests() > before


def register(cluster: Cluster, server: GpuWebhook, tenant: Tenant, on: bool) -> None:
    """Install or delete the rendered webhook configurations, then wait until a probe shows it took effect."""
    if on:
        cluster.env.install_webhooks(server.manifests, server.url, server.ca_pem)
    else:
        for api_version, kind, name in WEBHOOKS:
            cluster.env.request("DELETE", f"{cluster.env.resource_path(api_version, kind)}/{name}")
    retry(
        f"the webhook {'reached' if on else 'no longer reached'} by a probe",
        lambda: True if _probe_seen(server, cluster.env, tenant) == on else None,
        timeout=30,
        interval=0.2,
    )


def one_round(cluster: Cluster, tenant: Tenant, name: str, pods_count: int, timeout: float) -> float:
    body = bench_job(name, pods_count, tenant.queue)
    began = time.monotonic()
    made = tenant.create(body)
    if not made.ok:
        raise RuntimeError(f"creating {name}: {made.status} {made.message}")
    selector = f"batch.kubernetes.io/job-name={name}"
    retry(
        f"{pods_count} Running pods of {name}",
        lambda: (
            True
            if sum(p["status"].get("phase") == "Running" for p in pods(cluster, NAMESPACE, selector)) >= pods_count
            else None
        ),
        timeout=timeout,
        interval=0.05,
    )
    took = time.monotonic() - began
    cluster.env.request(
        "DELETE", tenant.path("batch/v1", "Job", name), {"propagationPolicy": "Background"}, headers=tenant.as_tenant
    )
    retry(
        f"{name}'s pods and Workload gone",
        lambda: (
            True
            if not pods(cluster, NAMESPACE, selector)
            and not cluster.items(f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/workloads")
            else None
        ),
        timeout=timeout,
        interval=0.2,
    )
    return took


def run(args: argparse.Namespace) -> dict[str, Any]:
    source = cluster_dir()
    if source is None:
        print("GPU_WEBHOOK_CLUSTER is unset: no cluster binaries (e.g. GPU_WEBHOOK_CLUSTER=../shared/cluster)")
        raise SystemExit(2)
    cluster = Cluster.start(source, apiserver_args=("--allow-privileged=true",))
    try:
        server = install_gpu_webhook(cluster, Path(tempfile.mkdtemp(prefix="bench-gpu-webhook-")))
        try:
            queues = install_queues(cluster)
            tenant = make_tenant(cluster, NAMESPACE, queues.tenants)
            times: dict[str, list[float]] = {"with": [], "without": []}
            order = ["with", "without", "without", "with"]
            for index in range(args.rounds * 2 + 1):
                mode = order[index % 4]
                register(cluster, server, tenant, mode == "with")
                took = one_round(cluster, tenant, f"bench-{index}", args.pods, args.timeout)
                if index == 0:
                    print(f"warm-up ({mode}): {took:.2f} s")
                    continue
                times[mode].append(took)
                print(f"round {index} {mode:8} {took:.2f} s", flush=True)
        finally:
            server.stop()
    finally:
        cluster.stop()
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    ratio = medians["with"] / medians["without"]
    print(
        f"Job create -> {args.pods} pods Running, median of {args.rounds} each: with gpu-webhook "
        f"{medians['with']:.2f} s, without {medians['without']:.2f} s, ratio {ratio:.3f} (goal <= 1.05)"
    )
    return {"pods": args.pods, "rounds": args.rounds, "seconds": times, "medians": medians, "ratio": ratio}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each configuration (default: 6)")
    parser.add_argument("--pods", type=int, default=8, help="pods per Job, one GPU each (default: 8)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a round may take (default: 120)")
    args = parser.parse_args(argv)
    result, meta = run_on_envtest("bench.job_to_running", run, args)
    save(RESULTS, "job-to-running", {**result, "meta": meta})
    return 0


if __name__ == "__main__":
    sys.exit(main())
