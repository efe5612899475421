"""Two `serve` replicas with different packs share one registration on a real kube-apiserver, and no
object the newer pack denies skips the webhook: rolling upgrades in both directions and a reload.

The newer replica serves the shipped pack; the older one a copy of it without the rules that act on
DRA claims (the pack before them). Both run as the webhook's ServiceAccount with only the RBAC of
manifests/base/rbac.yaml, manage the registration (webhook/server/registration_sync.py, one writer
elected with a Lease: webhook/server/registration_leases.py), and the configurations that
`gpu-webhook manifests` renders point at the newer replica. During every step a sampler reads the
live ValidatingWebhookConfiguration and sends a dry-run ResourceClaim with `allocationMode: All` in a
tenant namespace, which dra-claim-limits denies. A claim admitted while the newer replica is Ready
skipped the webhook (when the webhook is called it answers a denial, or the apiserver refuses the
call under failurePolicy Fail); so is a registration read without `resourceclaims` while it is Ready.
Both counts must be 0.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from tests.e2e.conftest import TENANT_LABEL
from tests.e2e.test_registration_sync import account_client, restored  # noqa: F401 (fixtures)
from tests.support import REPO, RULES
from tests.support.envtest import EnvTest, free_port, log_tail, spawn, terminate
from webhook.certs import CA_FILE, Bundle, generate_serving, load_ca, write_bundle
from webhook.engine.documents import API_VERSION as GROUP_VERSION
from webhook.install.registration import NAMESPACE
from webhook.server.registration_leases import LEADER, RECORD_LABEL, micro_time

TENANTS = "e2e-rollout"
VALIDATING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpu-webhook-validating"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "whole-node", "namespace": TENANTS},
    "spec": {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}]
        }
    },
}


@dataclass
class Replica:
    """One `gpu-webhook serve` process: its name (POD_NAME), pack, ports and log."""

    name: str
    rules: Path
    port: int
    metrics_port: int
    log: Path
    process: Any = None

    def detail(self) -> dict[str, Any] | None:
        """The /readyz detail, or None when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=2) as answer:
                return dict(json.loads(answer.read()))
        except urllib.error.HTTPError as error:
            return dict(json.loads(error.read()))
        except OSError:
            return None

    def ready(self) -> bool:
        detail = self.detail()
        return bool(detail and detail.get("ready"))

    def leader(self) -> float:
        """gpu_webhook_registration_leader on its /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith("gpu_webhook_registration_leader "):
                    return float(line.split()[1])
        raise AssertionError("no gpu_webhook_registration_leader on /metrics")


@dataclass
class Samples:
    """What the sampler saw, by whether the newer replica was Ready at the time."""

    claims: dict[str, int] = field(default_factory=dict)  # outcome -> count, while Ready
    registration_without_claims: int = 0  # reads of the live configuration without resourceclaims, while Ready
    reads: int = 0
    admitted_while_not_ready: int = 0
    outcomes: list[str] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return self.claims.get("admitted", 0)


def sends_claims(configuration: dict[str, Any]) -> bool:
    (validate,) = [w for w in configuration["webhooks"] if w["name"] == "validate.gpu-webhook.io"]
    return any("resourceclaims" in rule.get("resources", []) for rule in validate.get("rules") or [])


class Sampler:
    """A thread that reads the registration and sends a claim every `period` seconds (bounded by `limit`)."""

    def __init__(self, apiserver: EnvTest, newer: Replica, period: float = 0.25, limit: float = 240.0) -> None:
        self.apiserver, self.newer, self.period, self.limit = apiserver, newer, period, limit
        self.samples = Samples()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        ends = time.monotonic() + self.limit
        while not self._stop.wait(self.period) and time.monotonic() < ends:
            ready_before = self.newer.ready()
            live = self.apiserver.request("GET", VALIDATING_PATH)
            answer = self.apiserver.dry_run_create(CLAIM)
            ready = ready_before and self.newer.ready()  # Ready for the whole sample
            if answer.ok:
                outcome = "admitted"
            elif "dra-claim-limits" in answer.message:
                outcome = "denied"
            elif "failed calling webhook" in answer.message:
                outcome = "refused (webhook unreachable)"
            else:
                outcome = f"other: {answer.status} {answer.message[:200]}"
            if not ready:
                self.samples.admitted_while_not_ready += outcome == "admitted"
                continue
            self.samples.claims[outcome] = self.samples.claims.get(outcome, 0) + 1
            self.samples.outcomes.append(outcome)
            if live.ok:
                self.samples.reads += 1
                self.samples.registration_without_claims += not sends_claims(live.body)


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(newer, older): the shipped pack, and a copy without every rule that acts on DRA claims."""
    older = tmp_path_factory.mktemp("older-pack")
    for path in sorted(RULES.glob("*.yaml")):
        if "ResourceClaim" not in "".join(line for line in path.read_text().splitlines() if "kinds:" in line):
            shutil.copy(path, older / path.name)
    return RULES, older


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory, webhook_certs: Path) -> Path:
    """A serving certificate for 127.0.0.1, signed by the CA the rendered caBundle holds."""
    directory = tmp_path_factory.mktemp("rollout-tls")
    ca_cert, ca_key = load_ca(webhook_certs)
    cert, key = generate_serving(ca_cert, ca_key, ["localhost"], ["127.0.0.1"])
    write_bundle(Bundle(ca_cert, ca_key, cert, key), directory)
    return directory


@pytest.fixture(scope="module")
def kubeconfig(
    apiserver: EnvTest,
    account_client: kubernetes.client.ApiClient,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """A kubeconfig for the webhook's ServiceAccount (its RBAC as shipped)."""
    path = tmp_path_factory.mktemp("rollout-kube") / "kubeconfig"
    token = account_client.configuration.api_key["BearerToken"]
    cluster = {"server": apiserver.url, "certificate-authority": str(apiserver.ca_file)}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "e", "cluster": cluster}],
                "users": [{"name": "gpu-webhook", "user": {"token": token}}],
                "contexts": [{"name": "e", "context": {"cluster": "e", "user": "gpu-webhook"}}],
                "current-context": "e",
            }
        )
    )
    path.chmod(0o600)
    return path


@pytest.fixture
def replicas(
    apiserver: EnvTest,
    packs: tuple[Path, Path],
    serving: Path,
    kubeconfig: Path,
    manifests: list[dict[str, Any]],
    restored: None,  # noqa: F811
    tmp_path: Path,
) -> Iterator[tuple[Replica, Replica]]:
    """(newer, older), not started; the rendered configurations installed against the newer one."""
    newer_rules, older_rules = packs
    older_copy = tmp_path / "older"
    shutil.copytree(older_rules, older_copy)  # a test edits it (a reload)
    newer = Replica("replica-newer", newer_rules, free_port(), free_port(), tmp_path / "newer.log")
    older = Replica("replica-older", older_copy, free_port(), free_port(), tmp_path / "older.log")
    made = apiserver.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANTS, "labels": {TENANT_LABEL: "true"}}}
    )
    assert made.ok or made.status == 409, made.body
    _delete_leases(apiserver)
    apiserver.install_webhooks(manifests, f"https://127.0.0.1:{newer.port}", (serving / CA_FILE).read_bytes())
    yield newer, older
    for replica in (newer, older):
        terminate(replica.process, timeout=15)
    _delete_leases(apiserver)


def _delete_leases(apiserver: EnvTest) -> None:
    listing = apiserver.request("GET", LEASES)
    for lease in (listing.body or {}).get("items", []) if listing.ok else []:
        name = lease["metadata"]["name"]
        if name == LEADER or RECORD_LABEL in lease["metadata"].get("labels", {}):
            apiserver.request("DELETE", f"{LEASES}/{name}")


def start(replica: Replica, serving: Path, kubeconfig: Path, policies: str = "files") -> None:
    env = {k: v for k, v in os.environ.items() if k != "GPU_WEBHOOK_RULES"}
    env["POD_NAME"] = replica.name
    replica.process = spawn(
        [
            sys.executable,
            "-m",
            "webhook.cli",
            "serve",
            "--port",
            str(replica.port),
            "--cert-dir",
            str(serving),
            "--metrics-port",
            str(replica.metrics_port),
            "--rules",
            str(replica.rules),
            "--namespaces",
            "watch",
            "--policies",
            policies,
            "--kubeconfig",
            str(kubeconfig),
            "--manage-registration=true",
            "--shutdown-timeout",
            "2",
            "--drain-delay",
            "0",
        ],
        replica.log,
        env,
    )


def stop(replica: Replica) -> None:
    terminate(replica.process, timeout=15)
    replica.process = None


def wait(what: str, condition: Any, replicas: tuple[Replica, ...], timeout: float = 60.0) -> float:
    """Seconds until `condition()` holds; fails with the replicas' logs after `timeout`."""
    started = time.monotonic()
    while not condition():
        for replica in replicas:
            if replica.process is not None and replica.process.poll() is not None:
                pytest.fail(f"{replica.name} exited {replica.process.returncode}:\n{log_tail(replica.log)}")
        if time.monotonic() - started > timeout:
            logs = "\n".join(f"--- {r.name}\n{log_tail(r.log)}" for r in replicas)
            pytest.fail(f"not within {timeout:.0f} s: {what}\n{logs}")
        time.sleep(0.2)
    return time.monotonic() - started


def holder(apiserver: EnvTest) -> str | None:
    lease = apiserver.request("GET", f"{LEASES}/{LEADER}")
    return lease.body["spec"].get("holderIdentity") if lease.ok else None


def live_sends_claims(apiserver: EnvTest) -> bool:
    return sends_claims(apiserver.request("GET", VALIDATING_PATH).body)


def reload(replica: Replica) -> int:
    """Change the replica's pack (one more rule that acts on nothing the sampler sends); its generation before."""
    before = int((replica.detail() or {})["rules"]["generation"])
    source = (replica.rules / "serving-readiness-probe.yaml").read_text()
    (replica.rules / "serving-readiness-probe-copy.yaml").write_text(
        source.replace("name: serving-readiness-probe\n", "name: serving-readiness-probe-copy\n", 1)
    )
    return before


def report(name: str, samples: Samples) -> None:
    print(
        f"\n{name}: claims sent while the newer replica was Ready {sum(samples.claims.values())} "
        f"{samples.claims}; registration reads {samples.reads}, without resourceclaims "
        f"{samples.registration_without_claims}; admitted while it was not Ready {samples.admitted_while_not_ready}"
    )


def test_older_then_newer_then_a_reload_and_a_restart_of_the_older(
    apiserver: EnvTest, replicas: tuple[Replica, Replica], serving: Path, kubeconfig: Path
) -> None:
    newer, older = replicas
    assert live_sends_claims(apiserver)  # as rendered from the shipped pack
    with Sampler(apiserver, newer) as sampler:
        start(older, serving, kubeconfig)
        # alone, the older replica is the writer and its pack needs no claims: it narrows (nobody serves them)
        wait("the older replica writes its own needs", lambda: not live_sends_claims(apiserver), (older,))
        assert holder(apiserver) == older.name

        start(newer, serving, kubeconfig)
        seconds = wait("the newer replica Ready", newer.ready, replicas)
        assert live_sends_claims(apiserver)  # Ready only once the writer sent what its rules need
        assert holder(apiserver) == older.name  # the older replica wrote it: one writer

        generation = reload(older)
        wait("the older replica reloaded", lambda: older.detail()["rules"]["generation"] > generation, replicas)
        time.sleep(5)  # two and a half passes of each replica after the reload

        stop(older)  # the writer leaves: it hands the Lease over
        wait("the newer replica writes", lambda: holder(apiserver) == newer.name, replicas)
        start(older, serving, kubeconfig)
        wait("the older replica Ready again", older.ready, replicas)
        time.sleep(5)
    samples = sampler.samples
    report("older -> newer", samples)
    print(f"older -> newer: the newer replica was Ready {seconds:.1f} s after its start")
    assert samples.claims.get("denied", 0) >= 20, samples.claims
    assert samples.skipped == 0, samples.claims
    assert samples.registration_without_claims == 0
    assert set(samples.claims) <= {"denied"}, samples.claims


def test_newer_then_older_then_a_reload_of_the_older_and_its_leaving(
    apiserver: EnvTest, replicas: tuple[Replica, Replica], serving: Path, kubeconfig: Path
) -> None:
    newer, older = replicas
    with Sampler(apiserver, newer) as sampler:
        start(newer, serving, kubeconfig)
        wait("the newer replica Ready", newer.ready, replicas)
        assert holder(apiserver) == newer.name and live_sends_claims(apiserver)

        start(older, serving, kubeconfig)  # the older pack starts beside it (a roll-back, or a surge pod)
        wait("the older replica Ready", older.ready, replicas)
        time.sleep(5)
        assert (newer.leader(), older.leader()) == (1.0, 0.0)  # one writer, and the metric says which
        assert newer.detail()["registration"]["writer"]["liveReplicas"] == [newer.name, older.name]
        generation = reload(older)
        wait("the older replica reloaded", lambda: older.detail()["rules"]["generation"] > generation, replicas)
        time.sleep(5)
        stop(older)
        time.sleep(3)
        # the newer replica leaves too: only then may the registration narrow (the older one is back alone)
        start(older, serving, kubeconfig)
        wait("the older replica Ready", older.ready, replicas)
        time.sleep(3)
        assert live_sends_claims(apiserver)  # the newer one is still there
    samples = sampler.samples
    report("newer -> older", samples)
    assert samples.claims.get("denied", 0) >= 20, samples.claims
    assert samples.skipped == 0, samples.claims
    assert samples.registration_without_claims == 0
    assert set(samples.claims) <= {"denied"}, samples.claims
    stop(newer)
    wait(
        "the registration narrows once no live replica needs claims", lambda: not live_sends_claims(apiserver), (older,)
    )


def test_a_replica_that_publishes_no_needs_keeps_the_registration_as_it_is(
    apiserver: EnvTest, replicas: tuple[Replica, Replica], serving: Path, kubeconfig: Path
) -> None:
    """A Pod of the Deployment without a needs record (an earlier release): its needs are unknown, so the
    writer keeps what the live configuration sends until that Pod is gone. The Pods are listed as the
    ServiceAccount, with the shipped Role."""
    newer, older = replicas
    start(newer, serving, kubeconfig)
    wait("the newer replica Ready", newer.ready, replicas)
    account = apiserver.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}}
    )
    assert account.ok or account.status == 409, account.body
    earlier = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpu-webhook-earlier",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": "gpu-webhook"},
        },
        "spec": {  # the namespace enforces the restricted Pod Security profile
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "gpu-webhook",
                    "image": "registry.example.com/gpu-webhook:0.0.9",
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    made = apiserver.create(earlier)
    assert made.ok, made.body  # no scheduler here: it stays Pending, alive as far as the writer can tell
    pod = f"/api/v1/namespaces/{NAMESPACE}/pods/gpu-webhook-earlier"
    try:
        stop(newer)
        start(older, serving, kubeconfig)
        wait("the older replica is the writer", lambda: holder(apiserver) == older.name, replicas)
        wait(
            "the writer sees the Pod without a record",
            lambda: (
                (older.detail() or {}).get("registration", {}).get("writer", {}).get("unknownReplicas")
                == ["gpu-webhook-earlier"]
            ),
            replicas,
        )
        time.sleep(4)  # two passes of the writer
        assert live_sends_claims(apiserver)
    finally:
        assert apiserver.request("DELETE", pod, query={"gracePeriodSeconds": "0"}).ok
    seconds = wait("the registration narrows once that Pod is gone", lambda: not live_sends_claims(apiserver), replicas)
    print(f"\nunknown replica: kept while its Pod lived; narrowed {seconds:.1f} s after it was deleted")


GPUPOLICIES = f"/apis/{GROUP_VERSION}/gpupolicies"


def install_crds(apiserver: EnvTest) -> None:
    """The shipped CRDs, installed (or already there) and Established."""
    documents = [d for d in yaml.safe_load_all((REPO / "manifests/base/crds.yaml").read_text()) if d]
    for document in documents:
        made = apiserver.create(document)
        assert made.ok or made.status == 409, made.body
    for document in documents:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{document['metadata']['name']}"

        def established(path: str = path) -> bool:
            conditions = (apiserver.request("GET", path).body or {}).get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        deadline = time.monotonic() + 30
        while not established():
            assert time.monotonic() < deadline, f"{path} not Established"
            time.sleep(0.2)


def hold_the_writer_lease(apiserver: EnvTest, identity: str) -> None:
    """The writer's Lease held by `identity`, renewed now for an hour: a live writer that never writes
    (an older release that cannot, a writer whose RBAC lost the configurations)."""
    now = micro_time(time.time())
    spec = {"holderIdentity": identity, "leaseDurationSeconds": 3600, "acquireTime": now, "renewTime": now}
    lease = apiserver.request("GET", f"{LEASES}/{LEADER}")
    if lease.ok:
        body = {**lease.body, "spec": {**lease.body["spec"], **spec}}
        assert apiserver.request("PUT", f"{LEASES}/{LEADER}", body).ok
    else:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEADER}, "spec": spec}
        assert apiserver.request("POST", LEASES, body).ok


def ready_of(apiserver: EnvTest, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A GPUPolicy's Ready condition and byPod entries ({} and [] before any replica wrote)."""
    status = (apiserver.request("GET", f"{GPUPOLICIES}/{name}").body or {}).get("status") or {}
    condition = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
    return condition, list(status.get("byPod") or ())


def test_a_policy_that_widens_the_registration_is_ready_only_once_the_registration_sends_it(
    apiserver: EnvTest, replicas: tuple[Replica, Replica], serving: Path, kubeconfig: Path, tmp_path: Path
) -> None:
    """A GPUPolicy on ResourceClaims applied to a replica whose pack acts on none, while the writer's Lease is
    held by a writer that never writes: the replica runs the policy, but its Ready condition says
    NotRegistered, for as long as the live registration does not send ResourceClaims; it turns True once
    a writer has sent them, and never before."""
    newer, older = replicas
    install_crds(apiserver)
    # the older pack, served on the port the registration calls, reading the cluster's policy objects too
    replica = Replica("replica-policies", older.rules, newer.port, newer.metrics_port, tmp_path / "policies.log")
    start(replica, serving, kubeconfig, policies="both")
    try:
        wait("the replica writes its narrower registration", lambda: not live_sends_claims(apiserver), (replica,))
        stop(replica)
        hold_the_writer_lease(apiserver, "an-absent-writer")
        start(replica, serving, kubeconfig, policies="both")
        wait("the replica Ready", replica.ready, (replica,))
        assert holder(apiserver) == "an-absent-writer"

        claims = {
            "apiVersion": GROUP_VERSION,
            "kind": "GPUPolicy",
            "metadata": {"name": "e2e-claims-widen"},
            "spec": {
                "match": {"kinds": ["ResourceClaim"], "operations": ["CREATE"]},
                "validate": {"expression": "true", "message": "never"},
            },
        }
        made = apiserver.create(claims)
        assert made.ok, made.body

        def not_registered() -> bool:
            # other servers of the session that read the policy objects write entries of their own
            condition, entries = ready_of(apiserver, "e2e-claims-widen")
            ours = [e.get("reason") for e in entries if e.get("id") == replica.name]
            return condition.get("reason") == "NotRegistered" and ours == ["NotRegistered"]

        wait("the policy NotRegistered", not_registered, (replica,))
        condition, entries = ready_of(apiserver, "e2e-claims-widen")
        (entry,) = [e for e in entries if e.get("id") == replica.name]
        assert condition["status"] == "False" and entry["observedGeneration"] == 1, (condition, entry)
        assert not live_sends_claims(apiserver)
        time.sleep(4)  # the replica's registration pass every 2 s, its status pass every 1 s: nothing changes
        assert not_registered() and not live_sends_claims(apiserver)

        released = time.monotonic()
        assert apiserver.request("DELETE", f"{LEASES}/{LEADER}").ok  # the writer is gone: the replica takes over

        def ready() -> bool:
            condition, _ = ready_of(apiserver, "e2e-claims-widen")
            if condition.get("status") != "True":
                return False
            assert live_sends_claims(apiserver), "Ready while the registration does not send ResourceClaims"
            return True

        wait("the policy Ready", ready, (replica,))
        print(f"\nwidening GPUPolicy: Ready {time.monotonic() - released:.1f} s after a writer could write")
        assert holder(apiserver) == replica.name
    finally:
        apiserver.request("DELETE", f"{GPUPOLICIES}/e2e-claims-widen")
        stop(replica)
