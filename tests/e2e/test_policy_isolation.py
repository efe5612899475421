"""Policy objects fail closed on a real kube-apiserver: one broken object is the only one left out, and a
replica that cannot read a policy kind is not ready (or, already serving, keeps the policies it had).

Each test starts its own `gpu-webhook serve --policies both` (what manifests/base/deployment.yaml runs)
beside the session's server, with the session server's certificate, and points the rendered webhook
configurations at it for the test (put back afterwards), so every decision below is the apiserver's,
calling the server under test:

- a GPUPolicy whose CEL does not compile is stored with the `policies.gpu-webhook.io` entry taken out
  (as when the webhook was down), then the server starts (a restart: the object is already there).
  Every other GPUPolicy, overlay and exception serves; only the broken one is Ready=False, with its
  reason; /readyz is 200; gpu_webhook_policy_objects_rejected{kind="GPUPolicy"} is 1.
- a ServiceAccount bound to the shipped ClusterRole (manifests/base/rbac.yaml) without `gpupolicies`
  makes a server that is not ready, and /readyz says which kind and why; the same ServiceAccount
  losing that permission while serving keeps denying what the site's GPUPolicy denies.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import WebhookServer, gpu_pod
from tests.e2e.test_policy_objects import (  # noqa: F401 (crds: a fixture)
    GROUP_VERSION,
    crds,
    denial,
    deployment,
    get,
    path_of,
    policy,
    ready_condition,
    unlabelled,
    wait_for,
)
from tests.support import REPO, RULES
from tests.support.envtest import EnvTest, free_port, log_tail, spawn, terminate

NAMESPACE = "e2e-isolation"
ACCOUNTS = "e2e-isolation-accounts"
LABEL = "e2e.gpu-webhook.io/isolation-deny"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpu-webhook-validating"
POLICY_ENTRY = "policies.gpu-webhook.io"


@dataclass
class Replica:
    """A `gpu-webhook serve` subprocess of one test, with its plain-HTTP health and metrics port."""

    process: Any
    url: str
    metrics_port: int
    log: Path

    def readyz(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def gauge(self, name: str, **labels: str) -> float | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return None

    def validated(self) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        return sum(
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "gpu_webhook_requests_total" and s.labels.get("endpoint") == "validate"
        )

    def answered(self, what: str, until: Callable[[int, dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
        """The /readyz detail once `until(status, detail)` holds."""
        deadline = time.monotonic() + timeout
        last: Any = "no answer"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"serve exited with {self.process.returncode}:\n{log_tail(self.log, 60)}")
            try:
                status, detail = self.readyz()
                last = (status, detail)
                if until(status, detail):
                    return detail
            except OSError as error:
                last = str(error)
            time.sleep(0.2)
        pytest.fail(f"/readyz never showed {what}: {last}\n{log_tail(self.log, 60)}")


@pytest.fixture
def start_replica(
    apiserver: EnvTest, webhook_server: WebhookServer, tmp_path: Path
) -> Iterator[Callable[[Path, str], Replica]]:
    started: list[Replica] = []

    def start(kubeconfig: Path, name: str, *extra: str) -> Replica:
        port, metrics_port = free_port(), free_port()
        log = tmp_path / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if k != "GPU_WEBHOOK_RULES"}
        env["POD_NAME"] = name  # its own entry in the policies' status, beside the session server's
        process = spawn(
            [
                sys.executable, "-m", "webhook.cli", "serve",
                "--port", str(port), "--metrics-port", str(metrics_port),
                "--cert-dir", str(webhook_server.cert_dir), "--rules", str(RULES),
                "--kubeconfig", str(kubeconfig), "--policies", "both",
                "--manage-registration=false", "--shutdown-timeout", "1", *extra,
            ],
            log,
            env,
        )  # fmt: skip
        replica = Replica(process, f"https://127.0.0.1:{port}", metrics_port, log)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        terminate(replica.process, timeout=10)


@pytest.fixture
def route(
    apiserver: EnvTest, webhook_server: WebhookServer, manifests: list[dict[str, Any]], webhooks: list[str]
) -> Iterator[Callable[[Replica], None]]:
    """Point the rendered webhook configurations at a replica (same CA) until the test ends."""

    def to(replica: Replica) -> None:
        apiserver.install_webhooks(manifests, replica.url, webhook_server.ca_pem)
        before = replica.validated()
        probe = gpu_pod("probe", NAMESPACE)
        wait_for(
            f"the apiserver calls the replica\n{log_tail(replica.log, 40)}",
            lambda: apiserver.dry_run_create(probe) is not None and replica.validated() > before,
        )

    yield to
    apiserver.install_webhooks(manifests, webhook_server.url, webhook_server.ca_pem)


def kubeconfig_for(apiserver: EnvTest, account: str, path: Path) -> Path:
    token = apiserver.request(
        "POST",
        f"/api/v1/namespaces/{ACCOUNTS}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    assert token.ok, token.body
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "e", "cluster": {"server": apiserver.url, "certificate-authority": str(apiserver.ca_file)}}
                ],
                "users": [{"name": account, "user": {"token": token.body["status"]["token"]}}],
                "contexts": [{"name": "e", "context": {"cluster": "e", "user": account}}],
                "current-context": "e",
            }
        )
    )
    path.chmod(0o600)
    return path


def shipped_rules_without(plural: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The shipped ClusterRole's rules with `plural` taken out, and the rules that grant it alone."""
    documents = [d for d in yaml.safe_load_all((REPO / "manifests/base/rbac.yaml").read_text()) if d]
    (role,) = [d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpu-webhook"]
    kept, granting = [], []
    for rule in role["rules"]:
        if plural in rule["resources"]:
            granting.append({**copy.deepcopy(rule), "resources": [plural]})
            rule = {**rule, "resources": [r for r in rule["resources"] if r != plural]}
            if not rule["resources"]:
                continue
        kept.append(copy.deepcopy(rule))
    assert granting, f"the shipped ClusterRole does not grant {plural}"
    return kept, granting


def grant(apiserver: EnvTest, name: str, rules: list[dict[str, Any]], account: str) -> str:
    """A ClusterRole `name` with `rules`, bound to the ServiceAccount; returns the binding's path."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}}
    made = apiserver.create({**role, "rules": rules})
    assert made.ok or made.status == 409, made.body
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{name}-{account}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ACCOUNTS}],
    }
    made = apiserver.create(binding)
    assert made.ok or made.status == 409, made.body
    return f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}-{account}"


@pytest.fixture(scope="module")
def namespaces(apiserver: EnvTest) -> None:
    """The tenant namespace the decisions are asked in, and the one of the ServiceAccounts."""
    apiserver.create_namespace(NAMESPACE)
    apiserver.create_namespace(ACCOUNTS)


@pytest.fixture
def accounts(apiserver: EnvTest, namespaces: None) -> Iterator[Callable[[str], None]]:
    made: list[str] = []

    def account(name: str) -> None:
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ACCOUNTS}}
        answer = apiserver.create(body)
        assert answer.ok or answer.status == 409, answer.body
        made.append(name)

    yield account
    for name in made:
        apiserver.request("DELETE", f"/api/v1/namespaces/{ACCOUNTS}/serviceaccounts/{name}")


def store_without_the_policy_check(apiserver: EnvTest, body: dict[str, Any]) -> dict[str, Any]:
    """Create a policy object the /policies check would refuse: with that webhook entry taken out, as when
    the webhook was down; the entry is put back by the caller (`route` reinstalls the configurations)."""
    current = apiserver.request("GET", VALIDATING)
    assert current.ok, current.body
    configuration = dict(current.body)
    configuration["webhooks"] = [w for w in configuration["webhooks"] if w["name"] != POLICY_ENTRY]
    assert apiserver.request("PUT", VALIDATING, configuration).ok

    def stored() -> dict[str, Any] | None:
        answer = apiserver.create(body)
        return dict(answer.body) if answer.ok else None

    return wait_for("the broken object stored once the policy check is out", stored, timeout=15)


def cleanup(apiserver: EnvTest, objects: list[tuple[str, str, str]]) -> None:
    for plural, name, namespace in objects:
        apiserver.request("DELETE", path_of(plural, name, namespace))


def test_a_broken_gpupolicy_at_restart_is_the_only_object_not_ready_and_the_rest_is_enforced(
    apiserver: EnvTest,
    crds: list[str],  # noqa: F811 (the fixture)
    start_replica: Callable[..., Replica],
    route: Callable[[Replica], None],
    namespaces: None,
    record_property: Callable[[str, object], None],
) -> None:
    made: list[tuple[str, str, str]] = []
    try:
        for name, kinds in (("e2e-iso-deployments", ["Deployment"]), ("e2e-iso-pods", ["Pod"])):
            create = apiserver.create(policy(name, unlabelled(LABEL), f"{name} says no", kinds))
            assert create.ok, create.body
            made.append(("gpupolicies", name, ""))
        ceiling = {
            "apiVersion": GROUP_VERSION,
            "kind": "GPUPolicyOverlay",
            "metadata": {"name": "e2e-iso-site-ceiling"},
            # one entry on the broken GPUPolicy too: the overlay must keep raising the ceiling
            "spec": {
                "rules": [
                    {"name": "gpu-per-pod-ceiling", "params": {"defaultCeiling": 16}},
                    {"name": "e2e-iso-broken", "action": "Warn"},
                ]
            },
        }
        stored = store_without_the_policy_check(
            apiserver, policy("e2e-iso-broken", "object.metadata.name ==", "x", ["Pod"])
        )
        made.append(("gpupolicies", "e2e-iso-broken", ""))
        answer = apiserver.create(ceiling)
        assert answer.ok, answer.body
        made.append(("gpupolicyoverlays", "e2e-iso-site-ceiling", ""))
        exception = {
            "apiVersion": GROUP_VERSION,
            "kind": "GPUPolicyException",
            "metadata": {"name": "e2e-iso-excepted", "namespace": NAMESPACE},
            "spec": {
                "rules": ["e2e-iso-deployments"],
                "match": {"kinds": ["Deployment"], "names": ["excepted"]},
                "reason": "isolation test",
            },
        }
        answer = apiserver.create(exception)
        assert answer.ok, answer.body
        made.append(("gpupolicyexceptions", "e2e-iso-excepted", NAMESPACE))

        # the restart: a server that starts with the broken object already stored
        replica = start_replica(apiserver.kubeconfig, "e2e-isolation-replica")
        detail = replica.answered("ready", lambda status, _: status == 200)
        policies = detail["policies"]
        assert list(policies["rejected"]) == ["GPUPolicy/e2e-iso-broken"], policies
        assert "spec.validate.expression: CEL" in policies["rejected"]["GPUPolicy/e2e-iso-broken"]
        in_use = set(policies["inUse"])
        assert {
            "GPUPolicy/e2e-iso-deployments",
            "GPUPolicy/e2e-iso-pods",
            "GPUPolicyOverlay/e2e-iso-site-ceiling",
        } <= in_use
        assert "GPUPolicy/e2e-iso-broken" not in in_use
        assert replica.gauge("gpu_webhook_policy_objects_rejected", kind="GPUPolicy") == 1
        assert replica.gauge("gpu_webhook_policy_objects_rejected", kind="GPUPolicyOverlay") == 0
        record_property("objects_in_use", sorted(in_use))
        record_property("objects_rejected", sorted(policies["rejected"]))

        route(replica)
        # a GPUPolicy the broken one does not touch: enforced
        denied = denial(apiserver.dry_run_create(deployment("web", NAMESPACE, {LABEL: "yes"})))
        assert "e2e-iso-deployments says no" in denied
        labelled = gpu_pod("labelled", NAMESPACE)
        labelled["metadata"]["labels"] = {LABEL: "yes"}
        assert "e2e-iso-pods says no" in denial(apiserver.dry_run_create(labelled))
        # the exception applies
        excepted = apiserver.dry_run_create(deployment("excepted", NAMESPACE, {LABEL: "yes"}))
        assert excepted.ok, excepted.message
        # the site's ceiling (16), not the pack's 8
        twelve = gpu_pod("twelve", NAMESPACE)
        for limits in (
            twelve["spec"]["containers"][0]["resources"]["requests"],
            twelve["spec"]["containers"][0]["resources"]["limits"],
        ):
            limits["nvidia.com/gpu"] = "12"
        assert apiserver.dry_run_create(twelve).ok, apiserver.dry_run_create(twelve).message
        twenty = copy.deepcopy(twelve)
        twenty["metadata"]["name"] = "twenty"
        for limits in (
            twenty["spec"]["containers"][0]["resources"]["requests"],
            twenty["spec"]["containers"][0]["resources"]["limits"],
        ):
            limits["nvidia.com/gpu"] = "20"
        assert "at most 16 per pod" in denial(apiserver.dry_run_create(twenty))

        # status: the broken one alone is Ready=False, with its reason; the others Ready=True
        def entry_of(plural: str, name: str) -> dict[str, Any] | None:
            entries = {e["id"]: e for e in (get(apiserver, plural, name).get("status") or {}).get("byPod") or []}
            return entries.get("e2e-isolation-replica")

        broken = wait_for(
            "the replica's entry on the broken GPUPolicy", lambda: entry_of("gpupolicies", "e2e-iso-broken")
        )
        assert broken["ready"] is False and broken["reason"] == "Invalid" and "CEL" in broken["message"]
        condition = ready_condition(get(apiserver, "gpupolicies", "e2e-iso-broken"))
        assert condition["status"] == "False" and condition["reason"] == "Invalid"
        states = {"GPUPolicy/e2e-iso-broken": "False"}
        for plural, name, kind in (
            ("gpupolicies", "e2e-iso-deployments", "GPUPolicy"),
            ("gpupolicies", "e2e-iso-pods", "GPUPolicy"),
            ("gpupolicyoverlays", "e2e-iso-site-ceiling", "GPUPolicyOverlay"),
        ):
            entry = wait_for(f"the replica's entry on {name}", lambda p=plural, n=name: entry_of(p, n))
            assert entry["ready"] is True, entry
            condition = wait_for(
                f"{name} Ready=True",
                lambda p=plural, n=name: (c := ready_condition(get(apiserver, p, n))).get("status") == "True" and c,
            )
            states[f"{kind}/{name}"] = condition["status"]
        record_property("ready_states", states)
        assert stored["metadata"]["name"] == "e2e-iso-broken"
    finally:
        cleanup(apiserver, made)


def test_a_replica_that_may_not_list_gpupolicies_is_not_ready_and_one_that_loses_it_keeps_denying(
    apiserver: EnvTest,
    crds: list[str],  # noqa: F811 (the fixture)
    accounts: Callable[[str], None],
    start_replica: Callable[..., Replica],
    route: Callable[[Replica], None],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    kept, granting = shipped_rules_without("gpupolicies")
    bindings: list[str] = []
    made: list[tuple[str, str, str]] = []
    try:
        # never allowed: not ready, and /readyz says which kind and why
        accounts("e2e-no-gpupolicies")
        bindings.append(grant(apiserver, "e2e-iso-context", kept, "e2e-no-gpupolicies"))
        forbidden = start_replica(kubeconfig_for(apiserver, "e2e-no-gpupolicies", tmp_path / "k1"), "e2e-forbidden")
        detail = forbidden.answered(
            "GPUPolicy unavailable",
            # the other caches list a moment after the server starts: until then they are "not listed yet"
            lambda status, d: (
                status == 503
                and set(d.get("policies", {}).get("unavailable", {})) == {"GPUPolicy"}
                and d.get("namespaces", {}).get("synced") is True
            ),
        )
        why = detail["policies"]["unavailable"]["GPUPolicy"]
        assert why.startswith("listing gpupolicies.gpu-webhook.io is forbidden (HTTP 403)"), why
        assert "--policies files" in why
        assert detail["ready"] is False and detail["namespaces"]["synced"] is True
        assert forbidden.gauge("gpu_webhook_policy_source_ready", kind="GPUPolicy") == 0
        assert forbidden.gauge("gpu_webhook_policy_source_ready", kind="GPUPolicyOverlay") == 1
        time.sleep(2)
        assert forbidden.readyz()[0] == 503  # and it stays so
        record_property("forbidden_readyz", {"status": 503, "unavailable": detail["policies"]["unavailable"]})
        # the RBAC fixed: ready without a restart (it lists again every 10 s)
        bindings.append(grant(apiserver, "e2e-iso-gpupolicies", granting, "e2e-no-gpupolicies"))
        started = time.monotonic()
        forbidden.answered("ready once it may list", lambda status, d: status == 200, timeout=40)
        record_property("seconds_to_ready_after_the_rbac_fix", round(time.monotonic() - started, 1))
        assert forbidden.gauge("gpu_webhook_policy_source_ready", kind="GPUPolicy") == 1

        # allowed at start, then the permission is taken away: the site's GPUPolicy keeps denying
        answer = apiserver.create(policy("e2e-iso-site", unlabelled(LABEL), "the site says no", ["Deployment"]))
        assert answer.ok, answer.body
        made.append(("gpupolicies", "e2e-iso-site", ""))
        accounts("e2e-loses-gpupolicies")
        bindings.append(grant(apiserver, "e2e-iso-context", kept, "e2e-loses-gpupolicies"))
        revocable = grant(apiserver, "e2e-iso-gpupolicies", granting, "e2e-loses-gpupolicies")
        bindings.append(revocable)
        serving = start_replica(
            kubeconfig_for(apiserver, "e2e-loses-gpupolicies", tmp_path / "k2"),
            "e2e-loses-access",
            "--policy-watch-timeout",
            "2",
        )
        detail = serving.answered(
            "ready with the site's policy",
            lambda status, d: status == 200 and "GPUPolicy/e2e-iso-site" in d["policies"]["inUse"],
        )
        route(serving)
        web = deployment("web", NAMESPACE, {LABEL: "yes"})
        assert "the site says no" in denial(apiserver.dry_run_create(web))

        assert apiserver.request("DELETE", revocable).ok
        detail = serving.answered(
            "GPUPolicy degraded",
            lambda status, d: "GPUPolicy" in d.get("policies", {}).get("degraded", {}),
            timeout=30,
        )
        status, detail = serving.readyz()
        assert status == 200 and detail["ready"] is True  # still serving
        assert detail["policies"]["degraded"]["GPUPolicy"].startswith("listing gpupolicies.gpu-webhook.io is forbidden")
        assert "GPUPolicy/e2e-iso-site" in detail["policies"]["inUse"]
        assert serving.gauge("gpu_webhook_policy_source_ready", kind="GPUPolicy") == 0
        assert "the site says no" in denial(apiserver.dry_run_create(web))
        assert "objects listed before stay in use" in serving.log.read_text()
        record_property("lost_access_readyz", {"status": status, "degraded": detail["policies"]["degraded"]})
    finally:
        for path in bindings:
            apiserver.request("DELETE", path)
        cleanup(apiserver, made)


@pytest.mark.parametrize(
    ("plural", "cache", "served"),
    [
        # the pack's priority-class-by-workload reads `priorityClasses`: unable to list them, a replica
        # would set no class on any workload while reporting Ready
        ("priorityclasses", "priorityclass", None),
        # cpu-workload-in-gpu-only-queue reads `kueueQueues`: unable to list Kueue's LocalQueues, it would
        # tell no tenant; granted, it is ready on this apiserver without Kueue (404: no queues)
        ("localqueues", "localqueue", False),
    ],
)
def test_a_replica_that_may_not_list_what_its_rules_read_is_not_ready_until_it_may(
    apiserver: EnvTest,
    crds: list[str],  # noqa: F811 (the fixture)
    accounts: Callable[[str], None],
    start_replica: Callable[..., Replica],
    tmp_path: Path,
    plural: str,
    cache: str,
    served: bool | None,
) -> None:
    """A rule of the pack reads the cluster context this cache gives: the replica stays unready, and
    /readyz says why, until its RBAC lets it list them; then it is ready without a restart."""
    kept, granting = shipped_rules_without(plural)
    account = f"e2e-no-{plural}"
    bindings: list[str] = []
    try:
        accounts(account)
        bindings.append(grant(apiserver, f"e2e-iso-no-{plural}", kept, account))
        replica = start_replica(kubeconfig_for(apiserver, account, tmp_path / "k"), f"e2e-no-{cache}")
        detail = replica.answered(
            f"the {plural} list refused",
            lambda status, d: (
                status == 503
                and (d.get("namespaces", {}).get("caches", {}).get(cache, {}).get("lastError") or "").startswith(
                    "HTTP 403"
                )
                # the namespaces listed too (the caches start together): they alone do not make it ready
                and d["namespaces"]["caches"].get("namespace", {}).get("synced") is True
            ),
        )
        assert detail["namespaces"]["synced"] is False and detail["ready"] is False
        bindings.append(grant(apiserver, f"e2e-iso-{plural}", granting, account))
        detail = replica.answered("ready once it may list them", lambda status, d: status == 200, timeout=60)
        assert detail["namespaces"]["caches"][cache]["synced"] is True
        assert detail["namespaces"]["caches"][cache]["lastError"] is None
        assert detail["namespaces"]["caches"][cache].get("served") is served
    finally:
        for path in bindings:
            apiserver.request("DELETE", path)
