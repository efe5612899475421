"""The registration sync's thread and flags, against an in-memory apiserver (two configurations, Leases, Pods).

Who writes (the replica holding the Lease, and only with `serve --manage-registration`), that the
writer gives the union over live replicas and narrows only when no live replica may need what it
removes, and when a new replica becomes Ready. The real apiserver, RBAC, 409s and two `serve`
processes with different packs are in tests/e2e/test_registration_sync.py.
"""

from __future__ import annotations

import base64
import copy
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from tests.support import load_rule_text
from webhook.cli import build_parser
from webhook.commands.serve import manages_registration
from webhook.engine import RuleSet
from webhook.install.registration import ENTRIES, VALIDATING, configurations, entry_fields
from webhook.kube import rest
from webhook.server.registration_leases import LEADER, NEEDS, RECORD_LABEL, decode_needs, encode_needs, record_name
from webhook.server.registration_sync import RegistrationSync, in_step, uncovered

(VALIDATE,) = [e for e in ENTRIES if e.configuration == VALIDATING and not e.policies]
VALIDATING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpu-webhook-validating"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/gpu-webhook/leases"
PODS = "/api/v1/namespaces/gpu-webhook/pods"


def rule(name: str, kinds: str) -> str:
    return f"""apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  match: {{kinds: {kinds}, operations: [CREATE, UPDATE]}}
  autogen: false
  validate: {{expression: 'true', message: 'no'}}
"""


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    return load_rule_text(tmp_path_factory.mktemp("old"), rule("pods", "[Pod]"))


@pytest.fixture(scope="module")
def new(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    return load_rule_text(tmp_path_factory.mktemp("new"), rule("pods", "[Pod]"), rule("jobs", "[Job]"))


@dataclass
class Answer:
    status: int
    body: bytes

    def read(self) -> bytes:
        return self.body


class FakeApi:
    """GET and PUT of the webhook configurations by path, with resourceVersion preconditions; the
    Leases of one namespace (GET, POST, PUT, DELETE, list by label) and its Pods (list).

    No defaulting: what is PUT is stored as sent. tests/e2e/test_registration_sync.py runs the same
    passes against the real apiserver's defaulted objects."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 1
        self.puts: list[str] = []
        self.pods: list[dict[str, Any]] = []
        self.lease_requests = 0
        self.refuse_writes = False  # a PUT of a configuration gets 403 (the writer's RBAC broken)
        for obj in objects:
            self.store(copy.deepcopy(obj))

    def path(self, obj: dict[str, Any]) -> str:
        if obj["kind"] == "Lease":
            return f"{LEASES}/{obj['metadata']['name']}"
        return f"/apis/admissionregistration.k8s.io/v1/{obj['kind'].lower()}s/{obj['metadata']['name']}"

    def store(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[self.path(obj)] = obj

    def send(self, _client: Any, method: str, path: str, query: Any = None, body: Any = None, **_: Any) -> Answer:
        with self.lock:
            if path.startswith(LEASES):
                self.lease_requests += 1
                return self._lease(method, path, query, body)
            if path == PODS:
                return Answer(200, orjson.dumps({"items": self.pods}))
            current = self.objects.get(path)
            if current is None:
                return Answer(404, orjson.dumps({"kind": "Status", "code": 404, "message": "not found"}))
            if method == "GET":
                return Answer(200, orjson.dumps(current))
            assert method == "PUT" and query == [("fieldManager", "gpu-webhook")]
            if self.refuse_writes:
                return Answer(403, orjson.dumps({"kind": "Status", "code": 403, "message": "forbidden"}))
            if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
                return Answer(409, orjson.dumps({"kind": "Status", "code": 409, "message": "conflict"}))
            self.puts.append(path)
            self.store(copy.deepcopy(body))
            return Answer(200, orjson.dumps(self.objects[path]))

    def _lease(self, method: str, path: str, query: Any, body: Any) -> Answer:
        if method == "GET" and path == LEASES:
            (selector,) = [v for k, v in query if k == "labelSelector"]
            items = [
                o
                for p, o in self.objects.items()
                if p.startswith(LEASES) and selector in o["metadata"].get("labels", {})
            ]
            return Answer(200, orjson.dumps({"items": items}))
        if method == "POST":
            if self.path(body) in self.objects:
                return Answer(409, orjson.dumps({"code": 409, "message": "exists"}))
            self.store(copy.deepcopy(body))
            return Answer(201, orjson.dumps(self.objects[self.path(body)]))
        current = self.objects.get(path)
        if current is None:
            return Answer(404, orjson.dumps({"code": 404, "message": "not found"}))
        if method == "GET":
            return Answer(200, orjson.dumps(current))
        if method == "DELETE":
            del self.objects[path]
            return Answer(200, orjson.dumps({"kind": "Status"}))
        assert method == "PUT"
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            return Answer(409, orjson.dumps({"code": 409, "message": "conflict"}))
        self.store(copy.deepcopy(body))
        return Answer(200, orjson.dumps(self.objects[path]))

    def holder(self) -> str | None:
        lease = self.objects.get(f"{LEASES}/{LEADER}")
        return None if lease is None else lease["spec"].get("holderIdentity")


@dataclass
class Rules:
    ruleset: RuleSet | None
    generation: int = 1


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, old: RuleSet) -> FakeApi:
    fake = FakeApi(configurations(old))
    monkeypatch.setattr(rest, "send", fake.send)
    return fake


@pytest.fixture
def running(api: FakeApi) -> Iterator[Callable[..., RegistrationSync]]:
    started: list[RegistrationSync] = []

    def start(rules: Rules, manage: bool = True, identity: str = "a", **options: Any) -> RegistrationSync:
        settings = {"interval": 0.1, "poll": 0.02, "retry": 0.05, "lease_duration": 1, **options}
        sync = RegistrationSync(None, rules, manage=manage, identity=identity, **settings)  # type: ignore[arg-type]
        sync.start()
        started.append(sync)
        return sync

    yield start
    for sync in started:
        sync.stop()


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.01)


def validate_entry(api: FakeApi) -> dict[str, Any]:
    (webhook,) = [w for w in api.objects[VALIDATING_PATH]["webhooks"] if w["name"] == VALIDATE.name]
    return webhook


JOBS = [
    {
        "apiGroups": ["batch"],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["jobs"],
        "scope": "Namespaced",
    }
]


def sends_jobs(api: FakeApi) -> bool:
    """Whether the validating entry sends what only the new pack needs."""
    return not uncovered(validate_entry(api)["rules"], JOBS)


def test_one_writer_gives_the_union_and_a_narrower_replica_never_narrows(
    api: FakeApi, running: Callable[..., RegistrationSync], old: RuleSet, new: RuleSet
) -> None:
    newer = running(Rules(new), identity="newer")
    wait_for(lambda: api.holder() == "newer" and sends_jobs(api))
    assert in_step(validate_entry(api), entry_fields(new, VALIDATE))  # alone: exactly what its rules derive
    writes = len(api.puts)

    older = running(Rules(old), identity="older")  # a replica on the old pack starts beside it
    wait_for(lambda: older.status()["writer"].get("holder") == "newer")
    wait_for(lambda: older.status()["configurations"]["gpu-webhook-validating"]["found"] is True)
    time.sleep(0.5)  # ten passes of each
    assert sends_jobs(api) and older.writes == 0 and len(api.puts) == writes
    assert newer.status()["writer"]["liveReplicas"] == ["newer", "older"]
    assert older.ready and newer.ready

    # the writer stops: it hands the Lease over and withdraws its needs; only then may the registration narrow
    newer.stop()
    wait_for(lambda: api.holder() == "older" and not sends_jobs(api))
    assert in_step(validate_entry(api), entry_fields(old, VALIDATE))
    # /readyz's detail is published at the end of the pass that wrote the registration
    wait_for(lambda: older.status()["writer"]["leader"] is True)
    assert older.status()["writer"]["leaseTransitions"] == 1


def test_the_writer_widens_for_a_replica_that_starts_later_and_keeps_it_through_its_reload(
    api: FakeApi, running: Callable[..., RegistrationSync], old: RuleSet, new: RuleSet
) -> None:
    older = running(Rules(old), identity="older")
    wait_for(lambda: api.holder() == "older")
    rules = Rules(new)
    newer = running(rules, identity="newer", startup_grace=60)
    assert not newer.ready  # not Ready until the registration sends what its rules need
    wait_for(lambda: sends_jobs(api) and newer.ready)
    assert newer.writes == 0 and older.writes >= 1
    assert "matchConditions" not in validate_entry(api) or in_step(validate_entry(api), entry_fields(new, VALIDATE))

    # the older replica reloads (its own rules changed): the registration keeps what the newer one needs
    older_rules = older._rules  # the RuleStore's two fields, as the server swaps them
    older_rules.generation += 1
    time.sleep(0.5)
    assert sends_jobs(api)


def test_a_widening_reload_is_covered_only_once_the_writer_sent_it_and_the_follower_sees_it_at_once(
    api: FakeApi, running: Callable[..., RegistrationSync], old: RuleSet, new: RuleSet
) -> None:
    """`covers(generation)`, which a policy object's Ready condition waits for: a follower whose reload
    needs more than the registration sends is not covered while the writer cannot write, and sees the
    writer's union on its next pass, not an `interval` (here 60 s) later."""
    writer = running(Rules(old), identity="writer")
    wait_for(lambda: api.holder() == "writer")
    rules = Rules(old)
    follower = running(rules, identity="follower", interval=60)
    wait_for(lambda: follower.ready and follower.covers(1))
    assert not follower.covers(2)

    api.refuse_writes = True
    rules.ruleset, rules.generation = new, 2  # the RuleStore's swap: a GPUPolicy on Jobs arrived
    wait_for(lambda: follower.drift)
    time.sleep(0.3)  # six passes of the writer, every one refused
    assert not sends_jobs(api) and not follower.covers(2) and follower.covers(1)
    assert follower.ready  # a replica once Ready stays so: the object's condition says what waits

    api.refuse_writes = False
    wait_for(lambda: sends_jobs(api), timeout=2)
    wait_for(lambda: follower.covers(2), timeout=2)
    assert follower.writes == 0 and writer.writes >= 1 and not follower.drift


def test_a_replica_that_publishes_no_needs_keeps_what_is_live(
    api: FakeApi, running: Callable[..., RegistrationSync], old: RuleSet, new: RuleSet
) -> None:
    newer = running(Rules(new), identity="newer")
    wait_for(lambda: sends_jobs(api))
    newer.stop()
    # a Pod of the Deployment that writes no Lease (an earlier release): its needs are unknown
    api.pods = [{"metadata": {"name": "earlier-release"}, "status": {"phase": "Running"}}]
    older = running(Rules(old), identity="older")
    wait_for(lambda: older.status()["writer"].get("leader") is True)
    time.sleep(0.3)
    assert sends_jobs(api) and older.status()["writer"]["unknownReplicas"] == ["earlier-release"]
    api.pods[0]["status"]["phase"] = "Succeeded"  # gone
    wait_for(lambda: not sends_jobs(api))


def test_a_crashed_writer_is_replaced_once_its_lease_expires(
    api: FakeApi, running: Callable[..., RegistrationSync], old: RuleSet
) -> None:
    """No release (the process was killed): the Lease and its record stay until their duration passes
    without a change, as the other replica observes it."""
    crashed = running(Rules(old), identity="crashed")
    wait_for(lambda: api.holder() == "crashed")
    crashed._stopping.set()  # ends the thread between passes...
    crashed.leases.release = lambda: None  # type: ignore[method-assign]  # ...without the hand-over
    crashed.leases.withdraw = lambda: None  # type: ignore[method-assign]
    crashed.stop()
    other = running(Rules(old), identity="other")
    started = time.monotonic()
    wait_for(lambda: api.holder() == "other")
    assert time.monotonic() - started >= 0.9  # the lease duration (1 s) on the other's clock
    assert f"{LEASES}/{record_name('crashed')}" in api.objects
    # a record the new writer has just seen counts for a whole duration on its clock, then no more
    wait_for(lambda: other.status()["writer"]["liveReplicas"] == ["other"])


def test_report_only_never_writes(api: FakeApi, running: Callable[..., RegistrationSync], new: RuleSet) -> None:
    sync = running(Rules(new), manage=False)
    wait_for(lambda: sync.status()["drift"])
    time.sleep(0.2)
    assert api.puts == [] and sync.writes == 0 and api.lease_requests == 0
    missing = sync.status()["configurations"]["gpu-webhook-validating"]["webhooks"][VALIDATE.name]["missing"]
    assert missing == ["batch/v1 jobs CREATE,UPDATE"]
    age = sync.status()["configurations"]["gpu-webhook-validating"]["lastCheckAgeSeconds"]
    assert 0 <= age < 1  # read every 0.1 s here
    assert sync.ready and sync.status()["writer"] is None


def test_a_configuration_installed_later_gets_the_writers_fields(
    api: FakeApi, running: Callable[..., RegistrationSync], old: RuleSet, new: RuleSet
) -> None:
    installed = api.objects.pop(VALIDATING_PATH)
    sync = running(Rules(new), startup_grace=0.3)
    wait_for(lambda: sync.status()["configurations"]["gpu-webhook-validating"]["found"] is False)
    assert sync.status()["drift"] is True  # nothing sends what the rules need
    assert not sync.ready
    wait_for(lambda: sync.ready)  # the grace passed: a missing configuration does not block a roll-out forever
    # installed now, with a rule list wider than the rules need: the only live replica's fields are written
    wider = copy.deepcopy(installed)
    for webhook in wider["webhooks"]:
        webhook["rules"].append({"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["*"], "resources": ["*"]})
    api.store(wider)
    wait_for(lambda: in_step(validate_entry(api), entry_fields(new, VALIDATE)))
    assert api.puts == [VALIDATING_PATH]


@pytest.mark.parametrize(
    ("argv", "environment", "manages"),
    [
        ([], {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, True),  # auto, in a pod
        (["--kubeconfig", "k"], {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False),  # auto, pointed at a cluster
        (["--context", "prod"], {}, False),
        (["--manage-registration"], {}, True),
        (["--manage-registration=true", "--kubeconfig", "k"], {}, True),
        (["--manage-registration=false"], {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False),
        # the Deployment's args with GitOps' addition appended: the last one wins
        (["--manage-registration=true", "--manage-registration=false"], {}, False),
    ],
)
def test_who_writes(
    argv: list[str], environment: dict[str, str], manages: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(["serve", *argv])
    assert manages_registration(args) is manages


def test_a_broken_needs_record_narrows_nothing_and_says_why(
    api: FakeApi, running: Callable[..., RegistrationSync], old: RuleSet, new: RuleSet
) -> None:
    """A record the writer cannot read might hide any need: the writer keeps what is live and reports it."""
    newer = running(Rules(new), identity="newer")
    wait_for(lambda: sends_jobs(api))
    newer.stop()
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "gpu-webhook-needs-garbled",
            "labels": {RECORD_LABEL: "record"},
            "annotations": {NEEDS: "%%"},
        },
        "spec": {"holderIdentity": "garbled", "leaseDurationSeconds": 60, "renewTime": "2026-01-01T00:00:00.000000Z"},
    }
    api.store(lease)
    older = running(Rules(old), identity="older")
    wait_for(lambda: older.status()["writer"].get("leader") is True)
    time.sleep(0.3)
    assert sends_jobs(api)
    assert any("is not a needs record" in error for error in older.status()["writer"]["errors"])


@pytest.mark.parametrize(
    "value",
    [
        "%%",  # not base64
        base64.b64encode(b"not zlib").decode(),
        base64.b64encode(zlib.compress(b"[1, 2]")).decode(),  # not a map of entries
        base64.b64encode(zlib.compress(b'{"validate.gpu-webhook.io": {"rules": "all"}}')).decode(),
        # 1 MiB and more once inflated (a few KB on the wire): not read
        base64.b64encode(zlib.compress(b'{"a": {"rules": [], "x": "' + b"x" * (1 << 20) + b'"}}')).decode(),
        None,
    ],
)
def test_a_needs_annotation_is_read_only_when_it_is_one(value: Any) -> None:
    assert decode_needs(value) is None


def test_needs_round_trip_and_record_names_are_dns_names(new: RuleSet) -> None:
    needs = {e.name: entry_fields(new, e) for e in ENTRIES}
    value, digest = encode_needs(needs)
    assert decode_needs(value) == needs and len(digest) == 16
    assert encode_needs(dict(reversed(needs.items()))) == (value, digest)  # the same whatever the order
    assert record_name("Node_A/replica 1") == "gpu-webhook-needs-node-a-replica-1"
    assert len(record_name("x" * 400)) <= 253
