"""GPUPolicy objects in the server, with a stand-in for the cluster's watch caches: loaded with the rule files
through the one loader, hot-reloaded, last good kept, a name in both reported; `POST /policies` over
real TLS; the status each replica wants (webhook/policies/status.py).

What the apiserver decides (the CRDs, the registration, status writes, RBAC) is tested on a real one:
tests/e2e/test_policy_objects.py.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import LiveServer, client_ssl, cpu_pod, make_review, wait_for
from webhook.kube.policyobjects import policy_object
from webhook.policies.status import StatusWriter, replica_entry, same_status, wanted_status
from webhook.server import Server, ServerConfig

FILE_RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: from-a-file}
spec:
  match: {kinds: [Pod]}
  autogen: false
  validate: {expression: "!has(object.metadata.labels) || !('file-says-no' in object.metadata.labels)", message: file}
"""
LABEL = "object-says-no"


def gpupolicy(name: str, generation: int = 1, action: str = "Deny", expression: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicy",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": generation, "resourceVersion": "7"},
        "spec": {
            "action": action,
            "match": {"kinds": ["Pod"]},
            "autogen": False,
            "validate": {
                "expression": expression or f"!has(object.metadata.labels) || !('{LABEL}' in object.metadata.labels)",
                "message": f"{name} says no",
            },
        },
    }


@dataclass
class Cluster:
    """The server's PolicySource, as webhook.kube.PolicyCaches gives it, held in memory."""

    items: list[dict[str, Any]] = field(default_factory=list)
    synced: bool = True
    problems: dict[str, str] = field(default_factory=dict)  # kind -> why it cannot be read

    def objects(self) -> list[dict[str, Any]]:
        return list(self.items)

    def detail(self) -> dict[str, Any]:
        return {"gpupolicy": {"synced": self.synced, "objects": len(self.items)}}

    def kinds(self) -> list[str]:
        return ["GPUPolicy", "GPUPolicyOverlay"]

    def unavailable(self) -> dict[str, str]:
        return {} if self.synced else {kind: self.problems.get(kind, "not listed yet") for kind in self.kinds()}

    def degraded(self) -> dict[str, str]:
        return dict(self.problems) if self.synced else {}


def labelled(*labels: str) -> dict[str, Any]:
    pod = cpu_pod()
    pod["metadata"]["labels"] = {label: "yes" for label in labels}
    return pod


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    directory = tmp_path / "rules"
    directory.mkdir()
    (directory / "site.yaml").write_text(FILE_RULE)
    return directory


@contextlib.asynccontextmanager
async def serve(cert_dir: Path, rules: Path, cluster: Cluster) -> AsyncIterator[LiveServer]:
    config = ServerConfig(rules=[str(rules)], cert_dir=str(cert_dir), port=0, reload_interval=0.05, shutdown_timeout=5)
    server = Server(config, policies=cluster)
    await server.start()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
        yield LiveServer(server, session)
    await server.stop()


async def allowed(live: LiveServer, pod: dict[str, Any]) -> bool:
    return bool((await live.review("validate", make_review(pod)))["response"]["allowed"])


async def test_objects_are_rules_beside_the_files_and_follow_their_changes(cert_dir: Path, rules: Path) -> None:
    cluster = Cluster([gpupolicy("from-the-cluster")], synced=False)
    async with serve(cert_dir, rules, cluster) as live:
        # the caches have not listed the cluster yet: not ready (the first load had no objects)
        status, body = await live.get("/readyz")
        assert status == 503 and json.loads(body)["policies"]["loaded"] is False
        cluster.synced = True
        await wait_for(lambda: live.server.state.rules.cluster_loaded)
        status, body = await live.get("/readyz")
        assert status == 200, body
        assert json.loads(body)["policies"]["inUse"] == ["GPUPolicy/from-the-cluster"]
        assert not await allowed(live, labelled(LABEL))
        assert not await allowed(live, labelled("file-says-no"))
        assert await allowed(live, labelled())

        # a new generation of the object is a reload; a status-only change is not
        store = live.server.state.rules
        generation = store.generation
        with_status = copy.deepcopy(cluster.items[0])
        with_status["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        cluster.items = [with_status]
        assert not store.changed()
        cluster.items = [gpupolicy("from-the-cluster", generation=2, action="Warn")]
        await wait_for(lambda: store.generation == generation + 1)
        answer = await live.review("validate", make_review(labelled(LABEL)))
        assert answer["response"]["allowed"] is True
        assert answer["response"]["warnings"] == ["[from-the-cluster] from-the-cluster says no"]

        cluster.items = []
        await wait_for(lambda: store.generation == generation + 2)
        assert await allowed(live, labelled(LABEL))


async def test_a_name_in_both_files_and_objects_is_the_objects_problem_and_the_others_load(
    cert_dir: Path, rules: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = Cluster([gpupolicy("from-the-cluster")])
    async with serve(cert_dir, rules, cluster) as live:
        store = live.server.state.rules
        generation = store.generation
        with caplog.at_level(logging.ERROR, logger="gpu_webhook.reload"):
            cluster.items = [gpupolicy("from-the-cluster", generation=2, action="Warn"), gpupolicy("from-a-file")]
            await wait_for(lambda: store.generation == generation + 1)  # the other object's new generation serves
        assert store.errors == []  # no rule file is broken
        ((key, (error,)),) = store.rejected.items()
        assert key == ("GPUPolicy", "", "from-a-file")
        assert error.location.file == "GPUPolicy/from-a-file" and "duplicate rule name" in error.message
        assert any(getattr(r, "policy", "") == "GPUPolicy/from-a-file" for r in caplog.records)
        status, body = await live.get("/readyz")
        assert status == 200, body
        policies = json.loads(body)["policies"]
        assert policies["inUse"] == ["GPUPolicy/from-the-cluster"]
        assert list(policies["rejected"]) == ["GPUPolicy/from-a-file"]
        assert "duplicate rule name" in policies["rejected"]["GPUPolicy/from-a-file"]
        _, metrics = await live.get("/metrics")
        assert 'gpu_webhook_policy_objects_rejected{kind="GPUPolicy"} 1.0' in metrics
        assert 'gpu_webhook_policy_objects_rejected{kind="GPUPolicyOverlay"} 0.0' in metrics
        # the file's rule is the one that serves, and the object's new generation (Warn) too
        assert not await allowed(live, labelled("file-says-no"))
        answer = await live.review("validate", make_review(labelled(LABEL)))
        assert answer["response"]["allowed"] is True
        assert answer["response"]["warnings"] == ["[from-the-cluster] from-the-cluster says no"]

        # the status each object gets from this replica: only the duplicate is not Ready
        twin = policy_object(gpupolicy("from-a-file"))
        entry = replica_entry("replica-0", twin, store)
        assert entry["ready"] is False and entry["reason"] == "Invalid"
        assert "duplicate rule name" in entry["message"] and "observedGeneration" not in entry
        kept = replica_entry("replica-0", policy_object(gpupolicy("from-the-cluster", generation=2)), store)
        assert kept["ready"] is True and kept["observedGeneration"] == 2

        # fixed (deleted): nothing rejected any more
        cluster.items = [gpupolicy("from-the-cluster", generation=2, action="Warn")]
        await wait_for(lambda: not store.rejected)
        assert 'gpu_webhook_policy_objects_rejected{kind="GPUPolicy"} 0.0' in (await live.get("/metrics"))[1]


async def test_a_broken_object_at_start_up_leaves_every_other_rule_and_object_serving(
    cert_dir: Path, rules: Path
) -> None:
    cluster = Cluster([gpupolicy("broken", expression="object.metadata.name =="), gpupolicy("from-the-cluster")])
    async with serve(cert_dir, rules, cluster) as live:
        store = live.server.state.rules
        assert store.ruleset is not None
        assert sorted(r.name for r in store.ruleset.rules) == ["from-a-file", "from-the-cluster"]
        assert list(store.rejected) == [("GPUPolicy", "", "broken")]
        assert "spec.validate.expression: CEL" in store.rejected[("GPUPolicy", "", "broken")][0].message
        assert not await allowed(live, labelled("file-says-no"))
        assert not await allowed(live, labelled(LABEL))  # the other object's rule acts
        status, body = await live.get("/readyz")
        assert status == 200, body
        assert list(json.loads(body)["policies"]["rejected"]) == ["GPUPolicy/broken"]
        entry = replica_entry("replica-0", policy_object(cluster.items[0]), store)
        assert entry["ready"] is False and entry["reason"] == "Invalid" and "CEL" in entry["message"]
        assert replica_entry("replica-0", policy_object(cluster.items[1]), store)["ready"] is True


async def test_a_broken_new_generation_keeps_the_previous_one_until_a_restart(cert_dir: Path, rules: Path) -> None:
    """The last good state is kept at reload (reported Invalid, observedGeneration the old one); a new
    replica, which never ran it, leaves the object out and serves the rest."""
    cluster = Cluster([gpupolicy("from-the-cluster")])
    async with serve(cert_dir, rules, cluster) as live:
        store = live.server.state.rules
        generation = store.generation
        cluster.items = [gpupolicy("from-the-cluster", generation=2, expression="object.metadata.name ==")]
        await wait_for(lambda: store.generation == generation + 1)
        assert list(store.rejected) == [("GPUPolicy", "", "from-the-cluster")]
        assert store.running == {("GPUPolicy", "", "from-the-cluster"): 1}
        assert not await allowed(live, labelled(LABEL))  # generation 1 still denies
        entry = replica_entry("replica-0", policy_object(cluster.items[0]), store)
        assert entry["ready"] is False and entry["reason"] == "Invalid" and entry["observedGeneration"] == 1
        assert "CEL" in entry["message"] and entry["message"].endswith("generation 1 stays in use")
    async with serve(cert_dir, rules, cluster) as restarted:
        store = restarted.server.state.rules
        assert list(store.rejected) == [("GPUPolicy", "", "from-the-cluster")] and store.running == {}
        assert await allowed(restarted, labelled(LABEL))
        assert not await allowed(restarted, labelled("file-says-no"))


async def test_a_policy_kind_never_listed_keeps_the_replica_unready_and_says_why(cert_dir: Path, rules: Path) -> None:
    forbidden = "listing gpupolicies.gpu-webhook.io is forbidden (HTTP 403)"
    cluster = Cluster([], synced=False, problems={"GPUPolicy": forbidden})
    async with serve(cert_dir, rules, cluster) as live:
        status, body = await live.get("/readyz")
        assert status == 503
        assert json.loads(body)["policies"]["unavailable"]["GPUPolicy"] == forbidden
        metrics = (await live.get("/metrics"))[1]
        assert 'gpu_webhook_policy_source_ready{kind="GPUPolicy"} 0.0' in metrics
        # listed at last: ready; then refused again: still ready, the problem reported
        cluster.synced, cluster.problems = True, {}
        await wait_for(lambda: live.server.state.rules.cluster_loaded)
        assert (await live.get("/readyz"))[0] == 200
        assert 'gpu_webhook_policy_source_ready{kind="GPUPolicy"} 1.0' in (await live.get("/metrics"))[1]
        cluster.problems = {"GPUPolicy": forbidden}
        status, body = await live.get("/readyz")
        assert status == 200 and json.loads(body)["policies"]["degraded"] == {"GPUPolicy": forbidden}
        assert 'gpu_webhook_policy_source_ready{kind="GPUPolicy"} 0.0' in (await live.get("/metrics"))[1]


async def test_policies_endpoint_refuses_a_broken_policy_with_its_field_path(cert_dir: Path, rules: Path) -> None:
    cluster = Cluster([gpupolicy("from-the-cluster")])
    async with serve(cert_dir, rules, cluster) as live:

        async def check(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
            old = obj if operation == "UPDATE" else None
            response = (await live.review("policies", make_review(obj, operation, old=old)))["response"]
            return dict(response)

        broken = gpupolicy("new-one", expression="object.metadata.name ==")
        answer = await check(broken)
        assert answer["allowed"] is False and answer["status"]["code"] == 422
        assert "rule new-one: spec.validate.expression: CEL:" in answer["status"]["message"]

        bad_enum = gpupolicy("new-one")
        bad_enum["spec"]["onMissingContext"] = "Sometimes"
        answer = await check(bad_enum)
        assert "spec.onMissingContext: 'Sometimes' is not one of: Allow, Deny" in answer["status"]["message"]

        assert (await check(gpupolicy("new-one")))["allowed"] is True
        # an update of a stored object is not a duplicate of itself; a file's name is
        assert (await check(gpupolicy("from-the-cluster", generation=2), "UPDATE"))["allowed"] is True
        answer = await check(gpupolicy("from-a-file"))
        assert answer["allowed"] is False and "duplicate rule name" in answer["status"]["message"]

        # not a policy kind: nothing to check
        assert (await check(cpu_pod()))["allowed"] is True


def test_two_replicas_write_once_each_and_then_agree() -> None:
    """Each replica owns its entry and the condition is a function of the whole list: no ping-pong."""
    obj = policy_object(gpupolicy("p", generation=3))

    @dataclass
    class State:
        attempts: int = 1
        errors: list[Any] = field(default_factory=list)
        attempted: dict[Any, Any] = field(default_factory=dict)
        running: dict[Any, int] = field(default_factory=lambda: {("GPUPolicy", "", "p"): 3})
        loaded_in: dict[Any, int] = field(default_factory=dict)
        rejected: dict[Any, Any] = field(default_factory=dict)

    old = State(running={("GPUPolicy", "", "p"): 2})
    keep = lambda _name: True  # noqa: E731
    live = wanted_status(None, obj, replica_entry("a", obj, State()), "t0", keep)
    assert live["conditions"][0]["status"] == "True"
    live = wanted_status(live, obj, replica_entry("b", obj, old), "t1", keep)  # b still runs generation 2
    condition = live["conditions"][0]
    assert condition["status"] == "False" and condition["reason"] == "NotLoaded"
    assert condition["message"].startswith("1 of 2 replica(s) do not run generation 3: b:")
    # a looks again: nothing of its own changed, so nothing to write
    assert same_status(live, wanted_status(live, obj, replica_entry("a", obj, State()), "t2", keep))
    # b catches up: True again, with a new transition time; then both agree
    live = wanted_status(live, obj, replica_entry("b", obj, State()), "t3", keep)
    assert live["conditions"][0] == {
        "type": "Ready",
        "status": "True",
        "reason": "Loaded",
        "message": "2 replica(s) run generation 3",
        "observedGeneration": 3,
        "lastTransitionTime": "t3",
    }
    for replica in ("a", "b"):
        assert same_status(live, wanted_status(live, obj, replica_entry(replica, obj, State()), "t4", keep))
    # a replica known to be gone is dropped from the list when another writes
    gone = wanted_status(live, obj, replica_entry("a", obj, State()), "t5", lambda name: name != "b")
    assert [e["id"] for e in gone["byPod"]] == ["a"]


async def test_a_loaded_object_is_ready_on_a_managing_replica_once_the_registration_sends_what_it_needs(
    cert_dir: Path, rules: Path
) -> None:
    """`loaded_in` is the rules generation that took each object's generation in use; with `registered`
    (webhook/server/registration_sync.py `covers`), the entry waits for the registration of that one."""
    cluster = Cluster([gpupolicy("from-the-cluster"), gpupolicy("another")])
    async with serve(cert_dir, rules, cluster) as live:
        store = live.server.state.rules
        first = store.generation
        assert store.loaded_in == {("GPUPolicy", "", "from-the-cluster"): first, ("GPUPolicy", "", "another"): first}
        cluster.items = [gpupolicy("from-the-cluster", generation=2, action="Warn"), gpupolicy("another")]
        await wait_for(lambda: store.generation == first + 1)
        assert store.loaded_in == {
            ("GPUPolicy", "", "from-the-cluster"): first + 1,
            ("GPUPolicy", "", "another"): first,
        }

        changed = policy_object(cluster.items[0])
        unchanged = policy_object(cluster.items[1])
        registered_up_to = first  # the registration sends what generation `first` needed, not yet the next
        covers = lambda generation: generation <= registered_up_to  # noqa: E731
        entry = replica_entry("replica-0", changed, store, covers)
        assert entry["ready"] is False and entry["reason"] == "NotRegistered"
        assert entry["observedGeneration"] == 2 and "registration" in entry["message"]
        status = wanted_status(None, changed, entry, "t0", lambda _name: True)
        condition = status["conditions"][0]
        assert (condition["status"], condition["reason"]) == ("False", "NotRegistered")
        assert replica_entry("replica-0", unchanged, store, covers)["ready"] is True  # it waits for nothing new
        registered_up_to = first + 1
        assert replica_entry("replica-0", changed, store, covers) == {
            "id": "replica-0",
            "observedGeneration": 2,
            "ready": True,
        }
        assert replica_entry("replica-0", changed, store) == replica_entry("replica-0", changed, store, covers)


def test_policy_objects_need_a_cluster(cert_dir: Path) -> None:
    """--policies cluster (or both) without a cluster connection is a usage error, said at once."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "GPU_WEBHOOK_RULES")}
    result = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--policies", "cluster", "--port", "0",
         "--cert-dir", str(cert_dir), "--namespaces", "off"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "--policies cluster reads GPUPolicy objects from a cluster" in result.stderr


@pytest.mark.parametrize(("policies", "ready"), [("both", False), ("cluster", False), ("files", True), ("auto", True)])
def test_a_cluster_without_the_crds_keeps_a_replica_that_uses_them_unready(
    cert_dir: Path, tmp_path: Path, policies: str, ready: bool
) -> None:
    """The fresh install without the CRDs (tests/support/kubestub.py answers 404 for them): `--policies
    both|cluster` is not ready and says what to do; `files` (the opt-out) and `auto` (a 404 is "none") are."""
    import urllib.error
    import urllib.request

    from tests.support.envtest import free_port
    from tests.support.kubestub import KubeStub

    stub = KubeStub().start()
    stub.add("team-a")
    port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "GPU_WEBHOOK_RULES")}
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook.cli", "serve", "--port", str(port), "--metrics-port", str(metrics_port),
         "--cert-dir", str(cert_dir), "--kubeconfig", str(stub.kubeconfig(tmp_path / "kubeconfig")),
         "--policies", policies, "--manage-registration=false", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        detail: dict[str, Any] = {}
        deadline = time.monotonic() + 20

        def settled() -> bool:  # every cache has had its answer (the context caches start with the server)
            unavailable = detail.get("policies", {}).get("unavailable", {})
            listed = all(why != "not listed yet" for why in unavailable.values())
            return bool(detail.get("namespaces", {}).get("synced")) and listed and (status == 200) is ready

        while time.monotonic() < deadline and not settled():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2) as answer:
                    status, detail = answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as error:
                status, detail = error.code, json.loads(error.read())
            except OSError:
                time.sleep(0.1)
        assert settled(), detail
        assert (status == 200) is ready, detail
        if not ready:
            why = detail["policies"]["unavailable"]["GPUPolicy"]
            assert "not served by this cluster (HTTP 404: the CRD is not installed)" in why
            assert "install the CRDs" in why and "--policies files" in why
    finally:
        process.terminate()
        process.wait(timeout=10)
        stub.stop()


class FakeApi:
    """What rest.send needs of an ApiClient: answers by method, in order; records each call."""

    def __init__(self, answers: dict[str, list[tuple[int, Any]]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str, Any]] = []

    def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[Any, ...]:
        return method, path, kwargs.get("header_params"), kwargs.get("body"), None

    def call_api(self, method: str, url: str, headers: Any, body: Any, post: Any, **_: Any) -> Any:
        self.calls.append((method, url, copy.deepcopy(body)))
        status, answer = self.answers[method].pop(0)

        class Response:
            def __init__(self) -> None:
                self.status = status

            def read(self) -> bytes:
                return json.dumps(answer).encode()

        return Response()


def test_a_status_write_reads_again_after_a_conflict_and_writes_once() -> None:
    stored = gpupolicy("p", generation=1)
    other = {"id": "b", "observedGeneration": 1, "ready": True}
    after_b = {**copy.deepcopy(stored), "status": {"byPod": [other]}}
    api = FakeApi({"GET": [(200, stored), (200, after_b)], "PUT": [(409, {"message": "conflict"}), (200, {})]})
    obj = policy_object(stored)

    @dataclass
    class State:
        attempts: int = 1
        errors: list[Any] = field(default_factory=list)
        attempted: dict[Any, Any] = field(default_factory=lambda: {obj.key: obj})
        running: dict[Any, int] = field(default_factory=lambda: {obj.key: 1})
        rejected: dict[Any, Any] = field(default_factory=dict)

    writer = StatusWriter(api, State(), Cluster([stored]), "a")  # type: ignore[arg-type]
    assert writer.pass_once() == 1 and writer.writes == 1 and writer.failures == 0
    assert [method for method, _, _ in api.calls] == ["GET", "PUT", "GET", "PUT"]
    assert api.calls[1][1] == "/apis/gpu-webhook.io/v1alpha1/gpupolicies/p/status"
    written = api.calls[3][2]["status"]  # the second PUT kept b's entry, read again after the conflict
    assert [e["id"] for e in written["byPod"]] == ["a", "b"]
    assert written["conditions"][0]["status"] == "True"
