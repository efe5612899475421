"""The server keeps its webhook configurations in step with its rules, on a real kube-apiserver, as its
ServiceAccount with only the RBAC of manifests/base/rbac.yaml (webhook/server/registration_sync.py).

The configurations are the ones `gpu-webhook manifests` renders, made stale (a kind missing from a
rule list, a matchCondition the rules do not derive) and installed with a `url` clientConfig that
nothing answers: the apiserver never calls a webhook for what these tests do. The session's
configurations of the same names (the `webhooks` fixture, if another module set it up) are put back
as they were at the end of the module.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import REPO, RULES
from tests.support.envtest import EnvTest, free_port, log_tail, spawn, terminate
from webhook.certs import CA_FILE
from webhook.engine import RuleSet
from webhook.install.registration import CONFIGURATION_NAMES, ENTRIES, MUTATING, VALIDATING, entry_fields
from webhook.kube import rest
from webhook.server.metrics import Metrics
from webhook.server.registration_sync import FIELD_MANAGER, RegistrationSync

NAMESPACE = ACCOUNT = "gpu-webhook"
NOBODY = "https://127.0.0.1:9"  # the discard port: nothing answers, and no test makes the apiserver call
KINDS = (MUTATING, VALIDATING)
# what the sync must never change
FIXED = (
    "failurePolicy",
    "namespaceSelector",
    "objectSelector",
    "clientConfig",  # its caBundle included
    "timeoutSeconds",
    "sideEffects",
    "matchPolicy",
    "reinvocationPolicy",
    "admissionReviewVersions",
)


def path_of(kind: str, name: str | None = None) -> str:
    return f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{name or CONFIGURATION_NAMES[kind]}"


@dataclass
class Rules:
    """The RuleStore's two fields the sync reads."""

    ruleset: RuleSet | None
    generation: int = 1


@pytest.fixture(scope="module")
def restored(apiserver: EnvTest) -> Iterator[None]:
    """Put the session's two configurations back as they were (or delete them) after this module."""
    saved = {kind: apiserver.request("GET", path_of(kind)) for kind in KINDS}
    yield
    for kind, before in saved.items():
        if not before.ok:
            apiserver.request("DELETE", path_of(kind))
            continue
        # a test deletes and recreates one: its uid changed, so only name, labels and annotations go back
        metadata = {k: v for k, v in before.body["metadata"].items() if k in ("name", "labels", "annotations")}
        now = apiserver.request("GET", path_of(kind))
        if now.ok:
            metadata["resourceVersion"] = now.body["metadata"]["resourceVersion"]
            restored = apiserver.request("PUT", path_of(kind), {**before.body, "metadata": metadata})
        else:
            restored = apiserver.create({**before.body, "metadata": metadata})
        assert restored.ok, restored.body
        assert apiserver.request("GET", path_of(kind)).body["webhooks"] == before.body["webhooks"]


@pytest.fixture(scope="module")
def account_client(apiserver: EnvTest) -> Iterator[kubernetes.client.ApiClient]:
    """An ApiClient that authenticates as the server's ServiceAccount, bound by manifests/base/rbac.yaml as is."""
    documents = [d for d in yaml.safe_load_all((REPO / "manifests/base/namespace.yaml").read_text()) if d]
    documents += [d for d in yaml.safe_load_all((REPO / "manifests/base/rbac.yaml").read_text()) if d]
    for document in documents:
        made = apiserver.create(document)
        assert made.ok or made.status == 409, made.body  # 409: another module installed the manifests
    token = apiserver.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    assert token.ok, token.body
    configuration = kubernetes.client.Configuration()
    configuration.host = apiserver.url
    configuration.ssl_ca_cert = str(apiserver.ca_file)
    configuration.api_key = {"BearerToken": token.body["status"]["token"]}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    with kubernetes.client.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def install(
    apiserver: EnvTest, manifests: list[dict[str, Any]], webhook_certs: Path, restored: None
) -> Callable[..., dict[str, dict[str, Any]]]:
    """Install the rendered configurations (edited by `stale`) and return them as stored, by kind."""

    def installing(stale: Callable[[dict[str, Any]], None] | None = None) -> dict[str, dict[str, Any]]:
        documents = [copy.deepcopy(d) for d in manifests if d.get("kind") in KINDS]
        for document in documents:
            if stale is not None:
                stale(document)
        apiserver.install_webhooks(documents, NOBODY, (webhook_certs / CA_FILE).read_bytes())
        return stored(apiserver)

    return installing


def stored(apiserver: EnvTest) -> dict[str, dict[str, Any]]:
    found = {kind: apiserver.request("GET", path_of(kind)) for kind in KINDS}
    return {kind: answer.body for kind, answer in found.items() if answer.ok}


def without_jobs_and_with_a_condition(document: dict[str, Any]) -> None:
    """Stale: no rule sends batch/v1 jobs, and the tenant mutating entry skips everything but GPU pods."""
    for webhook in document["webhooks"]:
        for rule in webhook["rules"]:
            rule["resources"] = [r for r in rule["resources"] if r != "jobs"]
        webhook["rules"] = [r for r in webhook["rules"] if r["resources"]]
        if webhook["name"] == "mutate-tenants.gpu-webhook.io":
            webhook.setdefault("matchConditions", []).append({"name": "only-gpu-pods", "expression": "false"})


def webhooks(configuration: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in configuration["webhooks"]}


def drift_gauge(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {
        (s.labels["configuration"], s.labels["webhook"]): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        if family.name == "gpu_webhook_registration_drift"
        for s in family.samples
    }


def test_the_service_account_writes_exactly_the_derived_rules_and_conditions_once(
    apiserver: EnvTest,
    install: Callable[..., dict[str, dict[str, Any]]],
    account_client: kubernetes.client.ApiClient,
    pack: RuleSet,
) -> None:
    before = install(without_jobs_and_with_a_condition)
    assert not any("jobs" in r["resources"] for w in before[VALIDATING]["webhooks"] for r in w["rules"])
    metrics = Metrics()
    sync = RegistrationSync(account_client, Rules(pack), manage=True, metrics=metrics)

    assert sync.sync_once(pack)

    after = stored(apiserver)
    assert sync.writes == 2
    for kind in KINDS:
        old, new = webhooks(before[kind]), webhooks(after[kind])
        assert list(old) == list(new)  # no entry added, removed or reordered
        for entry in (e for e in ENTRIES if e.configuration == kind):
            fields = entry_fields(pack, entry)
            assert new[entry.name]["rules"] == fields["rules"], entry.name
            assert new[entry.name].get("matchConditions") == fields.get("matchConditions"), entry.name
            assert {k: new[entry.name].get(k) for k in FIXED} == {k: old[entry.name].get(k) for k in FIXED}
        assert after[kind]["metadata"].get("labels") == before[kind]["metadata"].get("labels")
        managers = {f["manager"] for f in after[kind]["metadata"]["managedFields"]}
        assert FIELD_MANAGER in managers
    assert set(drift_gauge(metrics).values()) == {0.0}
    assert sync.status()["drift"] is False

    # in step: neither a second pass nor a fresh replica's first pass writes again
    versions = {kind: after[kind]["metadata"]["resourceVersion"] for kind in KINDS}
    assert sync.sync_once(pack)
    fresh = RegistrationSync(account_client, Rules(pack), manage=True)
    assert fresh.sync_once(pack)
    assert (sync.writes, fresh.writes) == (2, 0)
    again = stored(apiserver)
    assert {kind: again[kind]["metadata"]["resourceVersion"] for kind in KINDS} == versions


def test_drift_is_reported_and_nothing_written_when_management_is_off(
    apiserver: EnvTest,
    install: Callable[..., dict[str, dict[str, Any]]],
    account_client: kubernetes.client.ApiClient,
    pack: RuleSet,
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = install(without_jobs_and_with_a_condition)
    metrics = Metrics()
    sync = RegistrationSync(account_client, Rules(pack), manage=False, metrics=metrics)

    with caplog.at_level(logging.WARNING, logger="gpu_webhook.registration"):
        assert sync.sync_once(pack)

    after = stored(apiserver)
    assert sync.writes == 0
    assert {k: after[k]["metadata"]["resourceVersion"] for k in KINDS} == {
        k: before[k]["metadata"]["resourceVersion"] for k in KINDS
    }
    status = sync.status()
    assert status["managed"] is False and status["drift"] is True
    tenants = status["configurations"]["gpu-webhook-mutating"]["webhooks"]["mutate-tenants.gpu-webhook.io"]
    assert "batch/v1 jobs CREATE,UPDATE" in tenants["missing"]
    assert tenants["unexpectedMatchConditions"] == ["only-gpu-pods"]
    validate = status["configurations"]["gpu-webhook-validating"]["webhooks"]["validate.gpu-webhook.io"]
    assert validate["missing"] == ["batch/v1 jobs CREATE,UPDATE"] and validate["drift"]
    gauge = drift_gauge(metrics)
    assert gauge[("gpu-webhook-mutating", "mutate-tenants.gpu-webhook.io")] == 1.0
    assert gauge[("gpu-webhook-validating", "validate.gpu-webhook.io")] == 1.0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert {getattr(r, "webhook", None) for r in warnings} >= {
        "validate.gpu-webhook.io",
        "mutate-tenants.gpu-webhook.io",
    }
    assert all(getattr(r, "missing", None) is not None for r in warnings)


def test_a_conflicting_write_is_read_again_and_keeps_the_other_writers_change(
    apiserver: EnvTest,
    install: Callable[..., dict[str, dict[str, Any]]],
    account_client: kubernetes.client.ApiClient,
    pack: RuleSet,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cert-manager's cainjector (or another replica) writes between our GET and PUT: the PUT gets 409."""
    install(without_jobs_and_with_a_condition)
    send = rest.send
    raced: list[str] = []

    def racing_send(api_client: Any, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if method == "PUT" and "webhookconfigurations" in path and path not in raced:
            raced.append(path)
            current = apiserver.request("GET", path).body
            current["metadata"].setdefault("annotations", {})["example.com/injected"] = "yes"
            assert apiserver.request("PUT", path, current).ok
        return send(api_client, method, path, *args, **kwargs)

    monkeypatch.setattr(rest, "send", racing_send)
    sync = RegistrationSync(account_client, Rules(pack), manage=True)

    assert sync.sync_once(pack)

    assert len(raced) == 2 and sync.writes == 2
    for kind, configuration in stored(apiserver).items():
        assert configuration["metadata"]["annotations"]["example.com/injected"] == "yes", kind
        for entry in (e for e in ENTRIES if e.configuration == kind):
            assert webhooks(configuration)[entry.name]["rules"] == entry_fields(pack, entry)["rules"]


def test_a_missing_configuration_is_reported_and_not_created(
    apiserver: EnvTest,
    install: Callable[..., dict[str, dict[str, Any]]],
    account_client: kubernetes.client.ApiClient,
    pack: RuleSet,
) -> None:
    install()
    assert apiserver.request("DELETE", path_of(VALIDATING)).ok
    sync = RegistrationSync(account_client, Rules(pack), manage=True)

    assert sync.sync_once(pack)

    assert apiserver.request("GET", path_of(VALIDATING)).status == 404
    status = sync.status()["configurations"]
    assert status["gpu-webhook-validating"]["found"] is False
    assert status["gpu-webhook-validating"]["webhooks"]["validate.gpu-webhook.io"]["drift"] is True
    assert status["gpu-webhook-mutating"]["found"] is True and sync.writes == 0  # rendered: in step


def test_the_service_account_may_touch_no_other_webhook_configuration(
    apiserver: EnvTest, account_client: kubernetes.client.ApiClient, restored: None
) -> None:
    other = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": VALIDATING,
        "metadata": {"name": "someone-elses"},
        "webhooks": [],
    }
    made = apiserver.create(other)
    assert made.ok or made.status == 409, made.body
    path = path_of(VALIDATING, "someone-elses")
    try:
        for method, body in (("GET", None), ("PUT", apiserver.request("GET", path).body), ("DELETE", None)):
            assert rest.send(account_client, method, path, body=body).status == 403, method
        listing = rest.send(
            account_client, "GET", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
        )
        assert listing.status == 403  # resourceNames cannot limit a list: none granted
        assert rest.send(account_client, "DELETE", path_of(MUTATING)).status == 403
    finally:
        apiserver.request("DELETE", path)


def test_serve_reports_drift_on_readyz_while_staying_ready(
    apiserver: EnvTest,
    install: Callable[..., dict[str, dict[str, Any]]],
    account_client: kubernetes.client.ApiClient,
    tmp_path: Path,
) -> None:
    """`serve --manage-registration=false`: the /readyz detail and the gauge say what is missing, readiness stays."""
    install(without_jobs_and_with_a_condition)
    configuration = account_client.configuration
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "e", "cluster": {"server": apiserver.url, "certificate-authority": str(apiserver.ca_file)}}
                ],
                "users": [{"name": ACCOUNT, "user": {"token": configuration.api_key["BearerToken"]}}],
                "contexts": [{"name": "e", "context": {"cluster": "e", "user": ACCOUNT}}],
                "current-context": "e",
            }
        )
    )
    kubeconfig.chmod(0o600)
    port = free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "GPU_WEBHOOK_RULES"}
    process = spawn(
        [
            sys.executable,
            "-m",
            "webhook.cli",
            "serve",
            "--port",
            "0",
            "--cert-dir",
            str(tmp_path / "tls"),
            "--metrics-port",
            str(port),
            "--rules",
            str(RULES),
            "--kubeconfig",
            str(kubeconfig),
            "--manage-registration=false",
            "--shutdown-timeout",
            "1",
        ],
        log,
        env,
    )
    try:
        detail = _ready_detail(process, port, log, lambda d: bool(d.get("registration", {}).get("drift")))
        registration = detail["registration"]
        assert detail["ready"] is True and registration["managed"] is False
        validate = registration["configurations"]["gpu-webhook-validating"]["webhooks"]["validate.gpu-webhook.io"]
        assert validate["missing"] == ["batch/v1 jobs CREATE,UPDATE"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            page = answer.read().decode()
        assert (
            'gpu_webhook_registration_drift{configuration="gpu-webhook-validating",webhook="validate.gpu-webhook.io"} 1.0'
            in page
        )
    finally:
        terminate(process, timeout=10)
    assert "the live webhook registration misses" in log.read_text()


def _ready_detail(
    process: subprocess.Popen[bytes], port: int, log: Path, until: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The /readyz detail once it answers 200 and `until(detail)` holds (30 s at most)."""
    deadline = time.monotonic() + 30
    last: Any = "no answer"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"serve exited with {process.returncode}:\n{log_tail(log)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                last = json.loads(answer.read())
                if until(last):
                    return dict(last)
        except OSError as error:
            last = str(error)
        time.sleep(0.2)
    pytest.fail(f"/readyz never showed it: {last}\n{log_tail(log)}")


def left_to_the_apiserver(document: dict[str, Any]) -> None:
    """The rendered configuration as a hand-written one would be: no `scope: '*'` (the default), no
    matchPolicy, no objectSelector; the apiserver fills them in on create."""
    for webhook in document["webhooks"]:
        webhook.pop("matchPolicy", None)
        webhook.pop("objectSelector", None)
        for rule in webhook.get("rules") or []:
            if rule.get("scope") == "*":
                del rule["scope"]


def test_drift_is_judged_on_the_objects_the_apiserver_defaulted(
    apiserver: EnvTest,
    install: Callable[..., dict[str, dict[str, Any]]],
    account_client: kubernetes.client.ApiClient,
    pack: RuleSet,
) -> None:
    """tests/kube's FakeApi stores what is PUT verbatim; here the live objects carry the apiserver's
    defaults (scope, matchPolicy, objectSelector), and neither the drift check nor the writer mistakes a
    defaulted field for a difference: no drift, no write, and a write only where something is missing."""
    before = install(left_to_the_apiserver)
    defaulted = [
        r for kind in KINDS for w in before[kind]["webhooks"] for r in w.get("rules") or [] if r.get("scope") == "*"
    ]
    assert defaulted, "the apiserver defaulted no rule's scope: nothing is tested"
    assert all(
        w["objectSelector"] == {} and w["matchPolicy"] == "Equivalent" for k in KINDS for w in before[k]["webhooks"]
    )

    report = RegistrationSync(account_client, Rules(pack), manage=False)
    assert report.sync_once(pack) and report.status()["drift"] is False
    writer = RegistrationSync(account_client, Rules(pack), manage=True)
    assert writer.sync_once(pack) and writer.sync_once(pack)
    assert writer.writes == 0
    assert {k: v["metadata"]["resourceVersion"] for k, v in stored(apiserver).items()} == {
        k: v["metadata"]["resourceVersion"] for k, v in before.items()
    }

    # drift in the defaulted form: found, written once, then in step with the stored (defaulted) object
    def stale(document: dict[str, Any]) -> None:
        left_to_the_apiserver(document)
        without_jobs_and_with_a_condition(document)

    install(stale)
    assert report.sync_once(pack) and report.status()["drift"] is True
    assert writer.sync_once(pack) and writer.writes == 2
    assert writer.sync_once(pack) and writer.writes == 2  # the stored object, defaults and all, is in step
    assert report.sync_once(pack) and report.status()["drift"] is False
    for kind, configuration in stored(apiserver).items():
        for entry in (e for e in ENTRIES if e.configuration == kind):
            assert webhooks(configuration)[entry.name]["rules"] == entry_fields(pack, entry)["rules"]
