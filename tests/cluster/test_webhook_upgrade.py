"""A rolling upgrade of gpu-webhook itself inside the whole cluster: two packs, one registration, and Kueue.

The older replica serves the pack without the rules that act on DRA claims; the newer one the shipped
pack. Both run as the rendered ServiceAccount, manage the registration (one writer elected with a
Lease, webhook/server/registration_leases.py), and sit behind one address the way a Service's
endpoints do: a connection goes to a replica that is Ready, round-robin, and to none when none is
(the stand-in for kube-proxy, which this layer does not run: kubernetes.io docs, concepts/services-
networking/service, "only Ready endpoints"). The roll-out is a Deployment's: the newer replica
starts, and the older one stops once it is Ready (maxUnavailable 0).

Throughout, a tenant creates a GPU Job every second and the live ValidatingWebhookConfiguration is
read. What must hold, from Kubernetes' and Kueue's sources:
- every Job stored carries the webhook's mutations (the queue label and suspend: kueue-queue-name;
  the GPU toleration: gpu-toleration), whichever replica answered: none skipped the webhook, since
  failurePolicy Fail refuses a call no replica can take (extensible-admission-controllers, "Failure
  policy") rather than admitting it;
- Kueue makes a Workload for every one of them (it manages a Job with a queue label:
  pkg/controller/jobframework/reconciler.go) and runs them on GPU nodes;
- the registration never lacks `resourceclaims` while the newer replica is Ready (a claim its pack
  denies would skip the webhook: issue 34's rolling upgrade).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cluster.conftest import WEBHOOK_NAMESPACE, GpuWebhook, Tenant
from tests.cluster.workloads import QUEUE_LABEL, delete, job, node_labels, running_pods, wait_for, workload_of
from tests.e2e.test_registration_rollout import LEASES, VALIDATING_PATH, Replica, sends_claims, start, stop
from tests.support import RULES
from tests.support.cluster import Cluster
from tests.support.envtest import free_port
from webhook.server.registration_leases import LEADER, RECORD_LABEL

pytestmark = pytest.mark.cluster
GPU_TOLERATION_KEY = "nvidia.com/gpu"


class Endpoints:
    """A TCP address that forwards each connection to a Ready replica (round-robin), or closes it."""

    def __init__(self, replicas: list[Replica]) -> None:
        self.replicas = replicas
        self.port = free_port()
        self.ready: set[str] = set()
        self.connections: dict[str, int] = {}
        self._turn = 0
        self._loop = asyncio.new_event_loop()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._serve, daemon=True),
            threading.Thread(target=self._probe, daemon=True),
        ]

    def __enter__(self) -> Endpoints:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._loop.call_soon_threadsafe(self._loop.stop)
        for thread in self._threads:
            thread.join(5)

    def _probe(self) -> None:  # the endpoints controller: Ready replicas only
        while not self._stop.wait(0.2):
            self.ready = {r.name for r in self.replicas if r.process is not None and r.ready()}

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._forward, "127.0.0.1", self.port))
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ready = [r for r in self.replicas if r.name in self.ready]
        if not ready:
            writer.close()
            return
        target = ready[self._turn % len(ready)]
        self._turn += 1
        self.connections[target.name] = self.connections.get(target.name, 0) + 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", target.port)
        except OSError:
            writer.close()
            return

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


@dataclass
class Seen:
    created: list[str] = field(default_factory=list)  # Jobs stored
    refused: list[str] = field(default_factory=list)  # creates the apiserver refused (no replica could answer)
    unmutated: list[str] = field(default_factory=list)  # Jobs stored without the webhook's mutations
    registration_without_claims: int = 0  # reads of the live configuration without resourceclaims, newer Ready
    reads: int = 0


class Tenants(threading.Thread):
    """Creates a 1-GPU Job every `period` seconds and reads the registration, until stopped."""

    def __init__(self, cluster: Cluster, team: Tenant, newer: Replica, period: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.cluster, self.team, self.newer, self.period = cluster, team, newer, period
        self.seen = Seen()
        self._halt = threading.Event()

    def stop(self) -> Seen:
        self._halt.set()
        self.join(30)
        return self.seen

    def run(self) -> None:
        number = 0
        while not self._halt.wait(self.period):
            ready = self.newer.process is not None and self.newer.ready()
            live = self.cluster.env.request("GET", VALIDATING_PATH)
            if ready and live.ok and self.newer.ready():
                self.seen.reads += 1
                self.seen.registration_without_claims += not sends_claims(live.body)
            number += 1
            name = f"train-{number:03d}"
            made = self.team.create(job(name, gpus=1))
            if not made.ok:
                self.seen.refused.append(f"{name}: {made.status} {made.message[:160]}")
                continue
            self.seen.created.append(name)
            labels = made.body["metadata"].get("labels", {})
            tolerations = made.body["spec"]["template"]["spec"].get("tolerations") or []
            mutated = (
                labels.get(QUEUE_LABEL) == self.team.queue
                and made.body["spec"].get("suspend") is True
                and any(t.get("key") == GPU_TOLERATION_KEY for t in tolerations)
            )
            if not mutated:
                self.seen.unmutated.append(name)


@pytest.fixture
def packs(tmp_path: Path) -> tuple[Path, Path]:
    """(newer, older): the shipped pack, and a copy without every rule that acts on DRA claims."""
    older = tmp_path / "older-pack"
    older.mkdir()
    for path in sorted(RULES.glob("*.yaml")):
        if "ResourceClaim" not in "".join(line for line in path.read_text().splitlines() if "kinds:" in line):
            shutil.copy(path, older / path.name)
    return RULES, older


@pytest.fixture
def behind_endpoints(
    cluster: Cluster, gpu_webhook: GpuWebhook, packs: tuple[Path, Path], tmp_path: Path
) -> Iterator[tuple[Replica, Replica, Endpoints]]:
    """(newer, older, endpoints), not started; the rendered configurations pointed at the endpoints. The
    session's own server and configurations are put back afterwards."""
    newer_rules, older_rules = packs
    newer = Replica("gpu-webhook-newer", newer_rules, free_port(), free_port(), tmp_path / "newer.log")
    older = Replica("gpu-webhook-older", older_rules, free_port(), free_port(), tmp_path / "older.log")
    _delete_leases(cluster)
    endpoints = Endpoints([newer, older])
    with endpoints:
        cluster.env.install_webhooks(gpu_webhook.manifests, f"https://127.0.0.1:{endpoints.port}", gpu_webhook.ca_pem)
        try:
            yield newer, older, endpoints
        finally:
            for replica in (newer, older):
                if replica.process is not None:
                    stop(replica)
            cluster.env.install_webhooks(gpu_webhook.manifests, gpu_webhook.url, gpu_webhook.ca_pem)
            _delete_leases(cluster)


def _delete_leases(cluster: Cluster) -> None:
    listing = cluster.env.request("GET", LEASES)
    for lease in (listing.body or {}).get("items", []) if listing.ok else []:
        name = lease["metadata"]["name"]
        if name == LEADER or RECORD_LABEL in lease["metadata"].get("labels", {}):
            cluster.env.request("DELETE", f"{LEASES}/{name}")


def _kubeconfig(gpu_webhook: GpuWebhook) -> Path:
    (found,) = [a.split("=", 1)[1] for a in gpu_webhook.args if a.startswith("--kubeconfig=")]
    return Path(found)


def holder(cluster: Cluster) -> str | None:
    lease = cluster.env.request("GET", f"{LEASES}/{LEADER}")
    return lease.body["spec"].get("holderIdentity") if lease.ok else None


def test_a_rolling_upgrade_of_the_webhook_leaves_no_job_unjudged_and_kueue_runs_them_all(
    cluster: Cluster,
    gpu_webhook: GpuWebhook,
    tenant: Callable[..., Tenant],
    behind_endpoints: tuple[Replica, Replica, Endpoints],
) -> None:
    newer, older, endpoints = behind_endpoints
    kubeconfig, serving = _kubeconfig(gpu_webhook), gpu_webhook.cert_dir
    assert WEBHOOK_NAMESPACE == "gpu-webhook"  # where both replicas' Leases live (registration_identity)
    team = tenant("team-upgrade")
    start(older, serving, kubeconfig, policies="both")
    wait_for(
        "the older replica Ready and behind the endpoints", lambda: True if older.name in endpoints.ready else None
    )
    sampler = Tenants(cluster, team, newer)
    sampler.start()
    try:
        time.sleep(4)  # the older release alone serves for a while
        start(newer, serving, kubeconfig, policies="both")
        began = time.monotonic()
        wait_for("the newer replica Ready", lambda: True if newer.name in endpoints.ready else None, timeout=90)
        ready_after = time.monotonic() - began
        assert sends_claims(cluster.get(VALIDATING_PATH))  # Ready only once the registration sends its kinds
        time.sleep(4)  # both serve
        stop(older)  # the Deployment's old pod terminates once the new one is Ready
        wait_for("the newer replica writes the registration", lambda: True if holder(cluster) == newer.name else None)
        time.sleep(4)
    finally:
        seen = sampler.stop()
    print(
        f"\nwebhook upgrade: {len(seen.created)} Jobs stored, {len(seen.refused)} refused, "
        f"{len(seen.unmutated)} unmutated; newer Ready {ready_after:.1f} s after its start; connections "
        f"{endpoints.connections}; registration reads while newer Ready {seen.reads}, without claims "
        f"{seen.registration_without_claims}"
    )
    assert len(seen.created) >= 10, seen
    assert seen.unmutated == [], seen.unmutated
    assert seen.registration_without_claims == 0 and seen.reads >= 5
    assert set(endpoints.connections) == {newer.name, older.name}  # both replicas answered the apiserver
    try:
        for name in seen.created:  # each one a Kueue workload: none escaped the queue
            wait_for(f"Kueue's Workload of {name}", lambda n=name: workload_of(cluster, team.namespace, n), timeout=60)
        first = seen.created[0]
        (pod,) = running_pods(cluster, team.namespace, f"batch.kubernetes.io/job-name={first}", 1)
        assert node_labels(cluster, pod["spec"]["nodeName"]).get("nvidia.com/gpu.present") == "true"
    finally:
        for name in seen.created:
            delete(cluster, team.path("batch/v1", "Job", name))
