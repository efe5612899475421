"""Fixtures of the whole-cluster layer: a cluster that runs workloads, Kueue, and gpu-webhook installed as rendered.

One cluster per session (tests/support/cluster.py: apiserver, controller-manager, scheduler,
six hollow nodes, Kueue), about 15 s to start here. gpu-webhook is installed from what
`gpu-webhook manifests` renders: every document but the Deployment (its pods would only be
Running on a hollow node) and the audit CronJob (run as a process by the audit test instead, on
no schedule), and the webhook configurations with a `url` to a local `gpu-webhook serve` that
runs as the rendered ServiceAccount, with the rendered Deployment's arguments. Tests isolate
themselves by namespace and delete what holds quota. Skips with one line when the binaries are absent.

    cluster       Cluster (tests/support/cluster.py)
    gpu_webhook   the installed webhook: its serve process, stoppable and restartable
    queues        ResourceFlavors, ClusterQueues, LocalQueues, WorkloadPriorityClasses, PriorityClasses
    tenant        a factory of tenant namespaces: labelled, a LocalQueue, a tenant user bound to `edit`
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import REPO, RULES
from tests.support.cluster import SKIP_REASON, Cluster, ClusterError, cluster_dir, retry
from tests.support.envtest import SKIP_REASON as ASSETS_SKIP_REASON
from tests.support.envtest import Response, assets_dir, free_port, log_tail, spawn, terminate
from webhook.certs import CA_FILE, Bundle, generate_serving, load_ca, write_bundle

TENANT_LABEL = "gpu-webhook.io/tenant"
QUEUE_ANNOTATION = "gpu-webhook.io/queue"
IMAGE = "registry.example.com/gpu-webhook@sha256:" + "0" * 64
# what clusters that run GPU workloads set (tests/e2e/conftest.py CLUSTER_FLAGS)
CLUSTER_FLAGS = ("--allow-privileged=true",)
SKIPPED_KINDS = {"Deployment", "CronJob"}  # the server runs as a process; the audit is run by test_audit
WEBHOOK_NAMESPACE = "gpu-webhook"


def gpu_webhook_cli(
    *args: str, kubeconfig: Path | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_WEBHOOK_RULES", "KUBECONFIG")}
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args, *(["--kubeconfig", str(kubeconfig)] if kubeconfig else [])],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """test_audit.py runs after every other scenario: it audits what they left stored."""
    last = [item for item in items if item.nodeid.startswith("tests/cluster/test_audit.py")]
    items[:] = [item for item in items if item not in last] + last


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if assets_dir() is None:
        pytest.skip(ASSETS_SKIP_REASON)
    source = cluster_dir()
    if source is None:
        pytest.skip(SKIP_REASON)
    running = Cluster.start(source, apiserver_args=CLUSTER_FLAGS)
    try:
        yield running
    finally:
        running.stop()


@dataclass
class GpuWebhook:
    """The installed gpu-webhook: documents as rendered, and the serve process that stands in for the Deployment."""

    cluster: Cluster
    args: list[str]
    cert_dir: Path
    ca_pem: bytes
    log: Path
    port: int
    manifests: list[dict[str, Any]] = field(repr=False)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "GPU_WEBHOOK_RULES"}
        self.process = spawn([sys.executable, "-m", "webhook.cli", "serve", *self.args], self.log, env)
        context = ssl.create_default_context(cafile=str(self.cert_dir / CA_FILE))

        def ready() -> bool | None:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ClusterError(f"gpu-webhook serve exited {self.process.returncode}\n{log_tail(self.log)}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=3, context=context) as answer:
                    return True if answer.status == 200 else None
            except OSError:
                return None

        retry("gpu-webhook serve /readyz", ready, timeout=60, interval=0.2)

    def stop(self) -> None:
        terminate(self.process, timeout=15)
        self.process = None

    def logs(self) -> str:
        return f"--- gpu-webhook serve (tail) ---\n{log_tail(self.log, 60)}"

    def readyz(self) -> dict[str, Any]:
        """The /readyz detail (its caches, rules, registration), whether ready or not."""
        context = ssl.create_default_context(cafile=str(self.cert_dir / CA_FILE))
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=5, context=context) as answer:
                return dict(yaml.safe_load(answer.read()))
        except urllib.error.HTTPError as error:
            return dict(yaml.safe_load(error.read()))

    def requests(self) -> float:
        """Admission requests this server answered so far (gpu_webhook_requests_total, every endpoint)."""
        context = ssl.create_default_context(cafile=str(self.cert_dir / CA_FILE))
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5, context=context) as answer:
            text = answer.read().decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "gpu_webhook_requests"
            for sample in family.samples
            if sample.name == "gpu_webhook_requests_total"
        )


def _serve_args(deployment: dict[str, Any]) -> list[str]:
    """The rendered Deployment's server arguments, less the two that concern a pod, not the server's decisions.

    `--metrics-host=0.0.0.0` (a pod's metrics port; here nothing may listen beyond loopback) and
    `--manage-registration` (the registration's single writer is a Lease-elected replica; this
    layer installs the configurations itself, with a url, and the registration's own behaviour is
    tests/e2e/test_registration_sync.py's).
    """
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    dropped = ("--metrics-host", "--metrics-port", "--manage-registration")
    return [a for a in container.get("args", []) if not a.startswith(dropped)]


@pytest.fixture(scope="session")
def gpu_webhook(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GpuWebhook]:
    """gpu-webhook installed from `gpu-webhook manifests` (enforce overlay, the audit CronJob component)."""
    server = install_gpu_webhook(cluster, tmp_path_factory.mktemp("gpu-webhook"))
    try:
        cluster.env.install_webhooks(server.manifests, server.url, server.ca_pem)
        yield server
    finally:
        server.stop()


def install_gpu_webhook(cluster: Cluster, directory: Path) -> GpuWebhook:
    """Every rendered document but the Deployment, the CronJob and the webhook configurations, and a
    started `serve` as the rendered ServiceAccount; the caller installs the configurations."""
    certs = directory / "ca"
    certs.mkdir()
    made = gpu_webhook_cli("certs", "--out", str(certs), "--keep-ca-key")
    assert made.returncode == 0, made.stderr
    rendered = gpu_webhook_cli(
        "manifests", "--ca", str(certs), "--rules", str(RULES), "--image", IMAGE, "--component", "audit-cronjob"
    )
    assert rendered.returncode == 0, rendered.stderr
    documents = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    webhook_kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    for document in documents:
        if document["kind"] in SKIPPED_KINDS or document["kind"] in webhook_kinds:
            continue
        cluster.apply(document, manager="gpu-webhook-install")
        if document["kind"] == "CustomResourceDefinition":
            cluster.wait_established(document["metadata"]["name"])
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = cluster.service_account_kubeconfig(WEBHOOK_NAMESPACE, account)
    serving = directory / "serve-tls"
    serving.mkdir()
    ca_cert, ca_key = load_ca(certs)
    cert, key = generate_serving(ca_cert, ca_key, ["localhost"], ["127.0.0.1"])
    write_bundle(Bundle(ca_cert, ca_key, cert, key), serving)
    port = free_port()
    args = [
        *_serve_args(deployment),
        f"--port={port}",
        f"--cert-dir={serving}",
        f"--rules={RULES}",
        "--namespaces=watch",
        f"--kubeconfig={kubeconfig}",
    ]
    server = GpuWebhook(
        cluster=cluster,
        args=args,
        cert_dir=serving,
        ca_pem=(serving / CA_FILE).read_bytes(),
        log=directory / "serve.log",
        port=port,
        manifests=documents,
    )
    server.start()
    return server


def _flavor(name: str, labels: dict[str, str], tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": labels}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
RESOURCES = ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"]
# quota per flavor of the tenants' ClusterQueue: the GPU flavors hold 16 NVIDIA GPUs (the two GPU nodes),
# 7 MIG slices, 8 AMD GPUs; the CPU flavor none, so a GPU-less pod set fits it first and a GPU one cannot
QUOTA = {
    "cpu": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "0", "amd.com/gpu": "0"},
    "nvidia-gpu": {
        "cpu": "4",
        "memory": "8Gi",
        "nvidia.com/gpu": "16",
        "nvidia.com/mig-1g.10gb": "0",
        "amd.com/gpu": "0",
    },
    "nvidia-mig": {
        "cpu": "2",
        "memory": "4Gi",
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "7",
        "amd.com/gpu": "0",
    },
    "amd-gpu": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "0", "amd.com/gpu": "8"},
}


def _cluster_queue(name: str, flavors: dict[str, dict[str, str]], resources: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            # Kueue docs, concepts/cluster_queue "Preemption": withinClusterQueue LowerPriority
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"},
            "resourceGroups": [
                {
                    "coveredResources": resources,
                    "flavors": [
                        {"name": flavor, "resources": [{"name": r, "nominalQuota": quota[r]} for r in resources]}
                        for flavor, quota in flavors.items()
                    ],
                }
            ],
        },
    }


@dataclass(frozen=True)
class Queues:
    tenants: str = "tenants"  # cpu, nvidia-gpu, nvidia-mig, amd-gpu flavors, in that order
    gpu_only: str = "gpu-only"  # the nvidia-gpu flavor alone: a GPU-less Job is admitted onto GPU nodes


@pytest.fixture(scope="session")
def queues(cluster: Cluster, gpu_webhook: GpuWebhook) -> Queues:
    return install_queues(cluster)


def install_queues(cluster: Cluster) -> Queues:
    """The flavors, ClusterQueues and priority classes of the layer, their ClusterQueues Active."""
    for flavor in (
        _flavor("cpu", {"node.example.com/pool": "cpu"}),
        # Kueue docs concepts/resource_flavor: nodeLabels and tolerations are added to the admitted pods
        _flavor("nvidia-gpu", {"nvidia.com/gpu.present": "true", "nvidia.com/mig.capable": "false"}, [GPU_TOLERATION]),
        _flavor("nvidia-mig", {"nvidia.com/mig.strategy": "mixed"}, [GPU_TOLERATION]),
        _flavor("amd-gpu", {"amd.com/gpu.family": "AI"}),
    ):
        cluster.apply(flavor)
    names = Queues()
    cluster.apply(_cluster_queue(names.tenants, QUOTA, RESOURCES))
    cluster.apply(
        _cluster_queue(names.gpu_only, {"nvidia-gpu": QUOTA["nvidia-gpu"]}, ["cpu", "memory", "nvidia.com/gpu"])
    )
    for name, value in (("training-batch", 100), ("serving-critical", 10000)):
        cluster.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    # the pod PriorityClasses priority-class-by-workload sets on GPU pod templates
    for name, value in (("gpu-batch", 100), ("gpu-critical", 100000)):
        cluster.apply(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
        )
    for name in (names.tenants, names.gpu_only):
        retry(f"ClusterQueue {name} Active", lambda n=name: _active(cluster, n), timeout=30)
    return names


def _active(cluster: Cluster, name: str) -> bool | None:
    queue = cluster.get(f"/apis/kueue.x-k8s.io/v1beta1/clusterqueues/{name}")
    conditions = (queue.get("status") or {}).get("conditions") or []
    return True if any(c["type"] == "Active" and c["status"] == "True" for c in conditions) else None


@dataclass
class Tenant:
    """A tenant namespace: the tenant label, a LocalQueue named by the namespace's queue annotation, a user bound to `edit`."""

    cluster: Cluster
    namespace: str
    user: str
    queue: str

    @property
    def as_tenant(self) -> dict[str, str]:
        return {"Impersonate-User": self.user}

    def create(self, body: dict[str, Any], user: dict[str, str] | None = None) -> Response:
        """Create `body` in this namespace as the tenant (impersonated), as their kubectl would."""
        body = {**body, "metadata": {**body["metadata"], "namespace": self.namespace}}
        path = self.cluster.env.resource_path(body["apiVersion"], body["kind"], self.namespace)
        return self.cluster.env.request("POST", path, body, headers=user if user is not None else self.as_tenant)

    def path(self, api_version: str, kind: str, name: str = "") -> str:
        base = self.cluster.env.resource_path(api_version, kind, self.namespace)
        return f"{base}/{name}" if name else base


def make_tenant(cluster: Cluster, namespace: str, cluster_queue: str, labels: dict[str, str] | None = None) -> Tenant:
    """A tenant namespace with its LocalQueue (named in the namespace's queue annotation) and user."""
    queue = f"{namespace}-queue"
    cluster.env.create_namespace(namespace, {TENANT_LABEL: "true", **(labels or {})}, {QUEUE_ANNOTATION: queue})
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": queue, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        }
    )
    user = f"{namespace}-user"
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "tenant-edit", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
    )
    # `edit` has no pods/ephemeralcontainers: sites that allow `kubectl debug` grant it beside it
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "tenant-debug", "namespace": namespace},
            "rules": [
                {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["get", "patch", "update"]}
            ],
        }
    )
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "tenant-debug", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-debug"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
    )
    made = Tenant(cluster, namespace, user, queue)
    # RBAC reaches the authorizer through an informer: wait until the tenant may act
    retry(
        f"{user} allowed in {namespace}",
        lambda: (
            True
            if cluster.env.request(
                "GET", f"/apis/apps/v1/namespaces/{namespace}/deployments", headers=made.as_tenant
            ).ok
            else None
        ),
        timeout=30,
        interval=0.1,
    )
    return made


@pytest.fixture(scope="session")
def tenant(cluster: Cluster, queues: Queues) -> Callable[..., Tenant]:
    made: dict[str, Tenant] = {}

    def make(namespace: str, cluster_queue: str = queues.tenants, labels: dict[str, str] | None = None) -> Tenant:
        if namespace not in made:
            made[namespace] = make_tenant(cluster, namespace, cluster_queue, labels)
        return made[namespace]

    return make
