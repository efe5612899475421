"""The registration sync's thread and flags, against an in-memory apiserver of two objects.

When it writes (a new rules generation: exactly; a periodic pass: only to widen), that it never
fights another writer, and who writes at all (`serve --manage-registration`). The real apiserver,
RBAC and 409s are in tests/e2e/test_registration_sync.py.
"""

from __future__ import annotations

import copy
import threading
import time
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
from webhook.server.registration_sync import RegistrationSync, in_step

(VALIDATE,) = [e for e in ENTRIES if e.configuration == VALIDATING and not e.policies]
VALIDATING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpu-webhook-validating"


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
    """GET and PUT of the webhook configurations by path, with resourceVersion preconditions."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 1
        self.puts: list[str] = []
        for obj in objects:
            self.store(copy.deepcopy(obj))

    def store(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[f"/apis/admissionregistration.k8s.io/v1/{obj['kind'].lower()}s/{obj['metadata']['name']}"] = obj

    def send(self, _client: Any, method: str, path: str, query: Any = None, body: Any = None, **_: Any) -> Answer:
        with self.lock:
            current = self.objects.get(path)
            if current is None:
                return Answer(404, orjson.dumps({"kind": "Status", "code": 404, "message": "not found"}))
            if method == "GET":
                return Answer(200, orjson.dumps(current))
            assert method == "PUT" and query == [("fieldManager", "gpu-webhook")]
            if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
                return Answer(409, orjson.dumps({"kind": "Status", "code": 409, "message": "conflict"}))
            self.puts.append(path)
            self.store(copy.deepcopy(body))
            return Answer(200, orjson.dumps(self.objects[path]))


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

    def start(rules: Rules, manage: bool = True) -> RegistrationSync:
        sync = RegistrationSync(None, rules, manage=manage, interval=0.1, poll=0.02)  # type: ignore[arg-type]
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


def test_a_new_generation_is_written_exactly_and_a_narrower_write_by_another_is_repaired(
    api: FakeApi, running: Callable[..., RegistrationSync], old: RuleSet, new: RuleSet
) -> None:
    rules = Rules(old)
    sync = running(rules)
    wait_for(
        lambda: sync.status()["generation"] == 1 and sync.status()["configurations"]["gpu-webhook-validating"]["found"]
    )
    time.sleep(0.3)  # three periodic passes
    assert api.puts == []  # rendered from these rules: in step, nothing written

    rules.ruleset, rules.generation = new, 2  # this replica reloaded
    wait_for(lambda: in_step(validate_entry(api), entry_fields(new, VALIDATE)))
    assert api.puts == [VALIDATING_PATH]  # the mutating entries: no mutating rule either way

    # another replica, still on the old rules, writes them exactly (its own reload): a periodic
    # pass here sees jobs missing and widens; then nobody writes again
    narrowed = copy.deepcopy(api.objects[VALIDATING_PATH])
    narrowed["webhooks"] = next(c for c in configurations(old) if c["kind"] == VALIDATING)["webhooks"]
    api.store(narrowed)
    wait_for(lambda: len(api.puts) == 2)
    resources = {r for rule_ in validate_entry(api)["rules"] for r in rule_["resources"]}
    assert "jobs" in resources
    writes = len(api.puts)
    time.sleep(0.3)
    assert len(api.puts) == writes
    assert sync.status()["drift"] is False and sync.writes == 2


def test_report_only_never_writes(api: FakeApi, running: Callable[..., RegistrationSync], new: RuleSet) -> None:
    sync = running(Rules(new), manage=False)
    wait_for(lambda: sync.status()["drift"])
    time.sleep(0.2)
    assert api.puts == [] and sync.writes == 0
    missing = sync.status()["configurations"]["gpu-webhook-validating"]["webhooks"][VALIDATE.name]["missing"]
    assert missing == ["batch/v1 jobs CREATE,UPDATE"]
    age = sync.status()["configurations"]["gpu-webhook-validating"]["lastCheckAgeSeconds"]
    assert 0 <= age < 1  # read every 0.1 s here


def test_a_configuration_installed_later_gets_the_exact_fields(
    api: FakeApi, running: Callable[..., RegistrationSync], old: RuleSet, new: RuleSet
) -> None:
    installed = api.objects.pop(VALIDATING_PATH)
    sync = running(Rules(new))
    wait_for(lambda: sync.status()["configurations"]["gpu-webhook-validating"]["found"] is False)
    assert sync.status()["drift"] is True  # nothing sends what the rules need
    # installed now, with a rule list wider than the rules need: the exact write was still owed
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
