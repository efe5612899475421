"""Policies as cluster objects on a real kube-apiserver: the CRDs, GPUPolicy status, admission of policies,
GPUPolicyExceptions and GPUPolicyOverlays (issue 26).

The session's `gpu-webhook serve` (tests/e2e/conftest.py) runs with the default `--policies auto`: it has
a cluster connection, so it loads the rule pack from files and the GPUPolicy/GPUPolicyOverlay objects of
the cluster together. It was started before this module installs the CRDs (manifests/base/crds.yaml, as
shipped), so it also proves that CRDs installed later are picked up without a restart. The webhook
configurations are the ones `gpu-webhook manifests` renders (the `webhooks` fixture): the validating
configuration's `policies.gpu-webhook.io` entry sends the policy objects to the server's /policies.

Every object made here is deleted at the end of the module (the CRDs stay: other modules' servers see
an empty list).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import kubernetes.client
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import WebhookServer, gpu_pod, gpu_webhook
from tests.e2e.test_registration_sync import account_client  # noqa: F401 (a fixture: the ServiceAccount)
from tests.support import REPO, RULES
from tests.support.envtest import EnvTest, Response
from webhook.kube.policies import PolicyCaches
from webhook.policies.status import StatusWriter
from webhook.server.metrics import Metrics
from webhook.server.reload import RuleStore

API = "/apis/gpu-webhook.io/v1alpha1"
GROUP_VERSION = "gpu-webhook.io/v1alpha1"
FORBIDDEN = "e2e.gpu-webhook.io/forbidden"
DENY_LABEL = "e2e.gpu-webhook.io/deny"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0, every: float = 0.2) -> T:
    """Call `probe` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:.0f} s: {what}")
        time.sleep(every)


def path_of(plural: str, name: str = "", namespace: str = "") -> str:
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{API}{where}/{plural}" + (f"/{name}" if name else "")


def policy(name: str, expression: str, message: str, kinds: list[Any], action: str = "Deny") -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicy",
        "metadata": {"name": name},
        "spec": {
            "action": action,
            "match": {"kinds": kinds, "operations": ["CREATE", "UPDATE"]},
            "autogen": False,  # the rule is about the object itself, not its pod templates
            "validate": {"expression": expression, "message": message},
        },
    }


def answer_when(call: Callable[[], Response], wanted: Callable[[Response], bool]) -> Callable[[], Response | None]:
    """A probe for wait_for: the answer of `call` once `wanted` says it is the one."""

    def probe() -> Response | None:
        answer = call()
        return answer if wanted(answer) else None

    return probe


def unlabelled(label: str) -> str:
    return f"!has(object.metadata.labels) || !('{label}' in object.metadata.labels)"


def deployment(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    selector = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"containers": [{"name": "main", "image": "registry.example.com/app:1.0"}]},
            },
        },
    }


def ready_condition(obj: dict[str, Any]) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def metric(server: WebhookServer, family_name: str, **labels: str) -> float:
    status, text = server.get("/metrics")
    assert status == 200, text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == family_name
        for sample in family.samples
        if sample.name.endswith("_total") and all(sample.labels.get(k) == v for k, v in labels.items())
    )


@pytest.fixture(scope="module")
def crds(apiserver: EnvTest, webhook_server: WebhookServer, webhooks: list[str]) -> Iterator[list[str]]:
    """The shipped CRDs installed and Established, and the running server seen to watch them."""
    documents = [d for d in yaml.safe_load_all((REPO / "manifests/base/crds.yaml").read_text()) if d]
    names = []
    for document in documents:
        made = apiserver.create(document)
        assert made.ok or made.status == 409, f"{document['metadata']['name']}: {made.status} {made.message}"
        names.append(document["metadata"]["name"])
    for name in names:

        def established(name: str = name) -> bool:
            answer = apiserver.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (answer.body or {}).get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_for(f"CRD {name} Established", established)

    def served() -> bool:
        status, text = webhook_server.get("/readyz")
        caches = yaml.safe_load(text).get("policies", {}).get("caches", {})
        return status == 200 and all(c.get("served") and c.get("synced") for c in caches.values()) and bool(caches)

    wait_for(f"the server watches the policy objects\n{webhook_server.logs()}", served, timeout=40)
    yield names
    for plural in ("gpupolicies", "gpupolicyoverlays"):
        for item in apiserver.request("GET", path_of(plural)).body.get("items", []):
            apiserver.request("DELETE", path_of(plural, item["metadata"]["name"]))
    for item in apiserver.request("GET", path_of("gpupolicyexceptions")).body.get("items", []):
        metadata = item["metadata"]
        apiserver.request("DELETE", path_of("gpupolicyexceptions", metadata["name"], metadata["namespace"]))


@pytest.fixture(scope="module")
def namespace(apiserver: EnvTest, crds: list[str]) -> str:
    apiserver.create_namespace("e2e-policy-objects")
    return "e2e-policy-objects"


def create(apiserver: EnvTest, body: dict[str, Any]) -> dict[str, Any]:
    made = apiserver.create(body)
    assert made.ok, f"{made.status} {made.message}"
    return dict(made.body)


def get(apiserver: EnvTest, plural: str, name: str, namespace: str = "") -> dict[str, Any]:
    answer = apiserver.request("GET", path_of(plural, name, namespace))
    assert answer.ok, answer.body
    return dict(answer.body)


def ready_at(apiserver: EnvTest, plural: str, name: str, generation: int) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        obj = get(apiserver, plural, name)
        condition = ready_condition(obj)
        status = obj.get("status") or {}
        if condition.get("status") == "True" and status.get("observedGeneration") == generation:
            return obj
        return None

    return probe


def denial(answer: Response) -> str:
    assert answer.status == 403 or not answer.ok, f"expected a denial, got {answer.status}"
    return answer.message


def test_a_gpupolicy_is_ready_within_seconds_and_admission_follows_it(
    apiserver: EnvTest, webhook_server: WebhookServer, namespace: str, record_property: Callable[[str, object], None]
) -> None:
    labelled = gpu_pod("labelled", namespace)
    labelled["metadata"]["labels"] = {FORBIDDEN: "yes"}
    assert apiserver.dry_run_create(labelled).ok  # nothing in the pack forbids the label

    made = create(
        apiserver,
        policy("e2e-no-forbidden-label", unlabelled(FORBIDDEN), "the forbidden label is forbidden", ["Pod"]),
    )
    started = time.monotonic()
    ready = wait_for(
        f"GPUPolicy e2e-no-forbidden-label Ready=True\n{webhook_server.logs()}",
        ready_at(apiserver, "gpupolicies", "e2e-no-forbidden-label", made["metadata"]["generation"]),
    )
    took = time.monotonic() - started
    record_property("seconds_to_ready", round(took, 2))  # the figure: --junitxml shows it
    assert took < 10, f"Ready after {took:.1f} s"
    (entry,) = ready["status"]["byPod"]
    assert entry["ready"] is True and entry["observedGeneration"] == made["metadata"]["generation"]
    assert ready_condition(ready)["reason"] == "Loaded"

    # kubectl get: the printer columns, through the apiserver's Table rendering
    table = apiserver.request(
        "GET",
        path_of("gpupolicies", "e2e-no-forbidden-label"),
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    assert [c["name"] for c in table.body["columnDefinitions"]] == ["Name", "Action", "FailurePolicy", "Ready", "Age"]
    assert table.body["rows"][0]["cells"][:4] == ["e2e-no-forbidden-label", "Deny", "Fail", "True"]  # defaulted

    # admission follows it
    assert "the forbidden label is forbidden" in denial(apiserver.dry_run_create(labelled))
    assert apiserver.dry_run_create(gpu_pod("plain", namespace)).ok

    # an update is a new generation: loaded, reported, followed (Warn admits with a warning)
    current = get(apiserver, "gpupolicies", "e2e-no-forbidden-label")
    current["spec"]["action"] = "Warn"
    updated = apiserver.request("PUT", path_of("gpupolicies", "e2e-no-forbidden-label"), current)
    assert updated.ok, updated.body
    generation = updated.body["metadata"]["generation"]
    assert generation == made["metadata"]["generation"] + 1
    wait_for("generation 2 Ready", ready_at(apiserver, "gpupolicies", "e2e-no-forbidden-label", generation))
    answer = wait_for(
        "the Warn action in effect", answer_when(lambda: apiserver.dry_run_create(labelled), lambda a: a.ok)
    )
    assert any("the forbidden label is forbidden" in w for w in answer.warnings)

    # settled: no status write for a while (written on change only, never per replica per second)
    writes = metric(webhook_server, "gpu_webhook_policy_status_writes")
    time.sleep(3)
    assert metric(webhook_server, "gpu_webhook_policy_status_writes") == writes
    record_property("status_writes_for_two_generations", writes)

    assert apiserver.request("DELETE", path_of("gpupolicies", "e2e-no-forbidden-label")).ok
    wait_for("the deleted policy no longer denies", lambda: not apiserver.dry_run_create(labelled).warnings)


def test_a_broken_policy_is_refused_at_apply_with_its_field_path(apiserver: EnvTest, namespace: str) -> None:
    broken = policy("e2e-broken-cel", "object.metadata.name ==", "never", ["Pod"])
    answer = apiserver.create(broken)
    assert answer.status in (400, 422), answer.body
    assert "policies.gpu-webhook.io" in answer.message
    assert "spec.validate.expression: CEL:" in answer.message

    # a name the rule files already define: it would never load (a duplicate), so it is refused
    twin = policy("gpu-node-affinity", "true", "twin", ["Pod"])
    answer = apiserver.create(twin)
    assert not answer.ok and "duplicate rule name" in answer.message, answer.body

    # an overlay on a param the rule does not have
    overlay = {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyOverlay",
        "metadata": {"name": "e2e-typo"},
        "spec": {"rules": [{"name": "gpu-node-affinity", "params": {"gpuNodes": {}}}]},
    }
    answer = apiserver.create(overlay)
    assert not answer.ok and "gpuNodes" in answer.message, answer.body

    # an exception for a rule that does not exist
    exception = {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyException",
        "metadata": {"name": "e2e-unknown-rule", "namespace": namespace},
        "spec": {"rules": ["no-such-rule"], "reason": "typo"},
    }
    answer = apiserver.create(exception)
    assert not answer.ok and "spec.rules" in answer.message and "no-such-rule" in answer.message, answer.body

    # none of them was stored
    for plural, name, where in (
        ("gpupolicies", "e2e-broken-cel", ""),
        ("gpupolicies", "gpu-node-affinity", ""),
        ("gpupolicyoverlays", "e2e-typo", ""),
        ("gpupolicyexceptions", "e2e-unknown-rule", namespace),
    ):
        assert apiserver.request("GET", path_of(plural, name, where)).status == 404


def test_an_exception_lets_one_deployment_through_one_rule_until_it_expires(
    apiserver: EnvTest, webhook_server: WebhookServer, crds: list[str], record_property: Callable[[str, object], None]
) -> None:
    excepted_namespace, elsewhere = "e2e-exceptions", "e2e-exceptions-elsewhere"
    apiserver.create_namespace(excepted_namespace)
    apiserver.create_namespace(elsewhere)
    for name in ("e2e-rule-a", "e2e-rule-b"):
        made = create(apiserver, policy(name, unlabelled(DENY_LABEL), f"{name} says no", ["Deployment"]))
        wait_for(f"{name} Ready", ready_at(apiserver, "gpupolicies", name, made["metadata"]["generation"]))
    web = deployment("web", excepted_namespace, {DENY_LABEL: "yes"})
    message = denial(apiserver.dry_run_create(web))
    assert "e2e-rule-a says no" in message and "e2e-rule-b says no" in message

    lifetime = 20.0
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=lifetime)
    exception = create(
        apiserver,
        {
            "apiVersion": GROUP_VERSION,
            "kind": "GPUPolicyException",
            "metadata": {"name": "web-migration", "namespace": excepted_namespace},
            "spec": {
                "rules": ["e2e-rule-a"],
                "match": {"kinds": ["Deployment"], "names": ["web"]},
                "expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "reason": "migrating to the new label scheme",
            },
        },
    )
    started = time.monotonic()

    def only_rule_b() -> str | None:
        message = denial(apiserver.dry_run_create(web))
        return message if "e2e-rule-a says no" not in message else None

    message = wait_for(f"the exception in effect\n{webhook_server.logs()}", only_rule_b, timeout=10)
    record_property("seconds_until_the_exception_applies", round(time.monotonic() - started, 2))
    assert "e2e-rule-b says no" in message  # one rule only: b still denies
    # another Deployment of the namespace, and the same one elsewhere: not excepted
    other = denial(apiserver.dry_run_create(deployment("other", excepted_namespace, {DENY_LABEL: "yes"})))
    assert "e2e-rule-a says no" in other
    assert "e2e-rule-a says no" in denial(apiserver.dry_run_create(deployment("web", elsewhere, {DENY_LABEL: "yes"})))
    key = f"{excepted_namespace}/{exception['metadata']['name']}"
    assert metric(webhook_server, "gpu_webhook_exceptions_used", exception=key, rule="e2e-rule-a") >= 1
    assert time.monotonic() - started < lifetime, "too slow to see the exception before it expired"

    # expired: rule a denies again, without a restart or a change of any object
    time.sleep(max(0.0, lifetime - (time.monotonic() - started)))
    wait_for(
        "the expired exception no longer applies",
        lambda: "e2e-rule-a says no" in denial(apiserver.dry_run_create(web)),
        timeout=5,
    )
    record_property("seconds_past_expiry_until_it_stops", round(time.monotonic() - started - lifetime, 2))
    for name in ("e2e-rule-a", "e2e-rule-b"):
        assert apiserver.request("DELETE", path_of("gpupolicies", name)).ok


def node_affinity_keys(pod: dict[str, Any]) -> set[str]:
    affinity = pod["spec"].get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    return {e["key"] for term in terms for e in term.get("matchExpressions", [])}


def test_a_param_overlay_changes_the_gpu_node_label_without_touching_the_pack(
    apiserver: EnvTest, namespace: str
) -> None:
    rule_file = RULES / "gpu-node-affinity.yaml"
    pack_before = hashlib.sha256(rule_file.read_bytes()).hexdigest()
    pod = gpu_pod("wants-a-gpu", namespace)
    before = apiserver.dry_run_create(pod)
    assert before.ok, before.message
    assert "example.com/gpu-node" not in node_affinity_keys(before.body)  # the shipped table is empty

    row = {"prefix": "nvidia.com/", "key": "example.com/gpu-node", "operator": "In", "values": ["true"]}
    made = create(
        apiserver,
        {
            "apiVersion": GROUP_VERSION,
            "kind": "GPUPolicyOverlay",
            "metadata": {"name": "site-gpu-node-label"},
            "spec": {"rules": [{"name": "gpu-node-affinity", "params": {"gpuNode": {"byResourcePrefix": [row]}}}]},
        },
    )
    wait_for(
        "the overlay Ready",
        ready_at(apiserver, "gpupolicyoverlays", "site-gpu-node-label", made["metadata"]["generation"]),
    )
    after = wait_for(
        "the overlay in effect",
        answer_when(
            lambda: apiserver.dry_run_create(pod),
            lambda a: a.ok and "example.com/gpu-node" in node_affinity_keys(a.body),
        ),
    )
    terms = after.body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "example.com/gpu-node", "operator": "In", "values": ["true"]} in terms["nodeSelectorTerms"][0][
        "matchExpressions"
    ]
    assert hashlib.sha256(rule_file.read_bytes()).hexdigest() == pack_before

    assert apiserver.request("DELETE", path_of("gpupolicyoverlays", "site-gpu-node-label")).ok
    wait_for(
        "the pack's own params again",
        lambda: "example.com/gpu-node" not in node_affinity_keys(apiserver.dry_run_create(pod).body),
    )


def test_the_registration_follows_the_policies_in_the_cluster(
    apiserver: EnvTest, webhook_server: WebhookServer, crds: list[str]
) -> None:
    """A GPUPolicy on a kind the pack does not target: the registration the rules derive must now send it.
    The session's server only reports (it was given --kubeconfig: --manage-registration auto is false)."""
    config_maps = {"kind": "ConfigMap", "group": "", "version": "v1", "resource": "configmaps"}
    made = create(apiserver, policy("e2e-configmaps", "true", "never", [config_maps]))
    wait_for(
        "e2e-configmaps Ready", ready_at(apiserver, "gpupolicies", "e2e-configmaps", made["metadata"]["generation"])
    )

    def missing() -> list[str]:
        _, text = webhook_server.get("/readyz")
        webhooks = yaml.safe_load(text)["registration"]["configurations"]["gpu-webhook-validating"]["webhooks"]
        return list(webhooks["validate.gpu-webhook.io"]["missing"])

    assert wait_for(
        "the drift names configmaps", lambda: "v1 configmaps CREATE,UPDATE (any scope)" in missing() or None
    )
    assert apiserver.request("DELETE", path_of("gpupolicies", "e2e-configmaps")).ok
    wait_for("no drift once it is gone", lambda: not missing() or None)


def test_only_the_exception_admin_role_may_create_exceptions_and_only_where_bound(
    apiserver: EnvTest, crds: list[str]
) -> None:
    documents = [d for d in yaml.safe_load_all((REPO / "manifests/base/rbac.yaml").read_text()) if d]
    (role,) = [d for d in documents if d["metadata"]["name"] == "gpu-webhook-exception-admin"]
    made = apiserver.create(role)
    assert made.ok or made.status == 409, made.body
    bound, other = "e2e-exception-admins", "e2e-no-exception-admins"
    apiserver.create_namespace(bound)
    apiserver.create_namespace(other)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "gpu-exceptions", "namespace": bound},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "platform-alice"}],
    }
    assert apiserver.create(binding).ok

    def attempt(where: str) -> Response:
        body = {
            "apiVersion": GROUP_VERSION,
            "kind": "GPUPolicyException",
            "metadata": {"name": "alice", "namespace": where},
            "spec": {"rules": ["gpu-node-affinity"], "reason": "test"},
        }
        path = path_of("gpupolicyexceptions", namespace=where)
        return apiserver.request("POST", path, body, {"dryRun": "All"}, headers={"Impersonate-User": "platform-alice"})

    allowed = wait_for("the RoleBinding in effect", answer_when(lambda: attempt(bound), lambda a: a.ok))
    assert allowed.body["metadata"]["namespace"] == bound
    assert attempt(other).status == 403


def test_the_service_account_watches_policies_and_writes_their_status_with_the_shipped_rbac(
    apiserver: EnvTest,
    crds: list[str],
    account_client: kubernetes.client.ApiClient,  # noqa: F811 (the fixture)
) -> None:
    """A second replica, in process, as the ServiceAccount bound by manifests/base/rbac.yaml: it lists and
    watches the policy objects, loads them with the pack, and adds its own entry to the status."""
    made = create(apiserver, policy("e2e-second-replica", unlabelled(FORBIDDEN), "no", ["Pod"]))
    generation = made["metadata"]["generation"]
    wait_for(
        "the session's replica wrote its entry", ready_at(apiserver, "gpupolicies", "e2e-second-replica", generation)
    )
    caches = PolicyCaches(account_client)
    caches.start()
    try:
        assert caches.wait_synced(10)
        assert all(d["served"] for d in caches.detail().values())
        store = RuleStore(paths=[str(RULES)], metrics=Metrics(), cluster=caches)
        assert store.load() and store.running[("GPUPolicy", "", "e2e-second-replica")] == generation
        writer = StatusWriter(account_client, store, caches, "second-replica")
        wait_for(
            "its object in the cache", lambda: "e2e-second-replica" in {o["metadata"]["name"] for o in caches.objects()}
        )
        assert writer.pass_once() >= 1 and writer.failures == 0
        stored = get(apiserver, "gpupolicies", "e2e-second-replica")
        entries = {e["id"]: e for e in stored["status"]["byPod"]}
        assert entries["second-replica"] == {"id": "second-replica", "observedGeneration": generation, "ready": True}
        assert len(entries) == 2
        condition = ready_condition(stored)
        assert condition["status"] == "True" and condition["message"] == f"2 replica(s) run generation {generation}"
        # in step: another pass writes nothing
        wait_for("the cache has the write", lambda: "second-replica" in str(caches.objects()))
        assert writer.pass_once() == 0 and writer.writes >= 1
    finally:
        caches.stop()
    assert apiserver.request("DELETE", path_of("gpupolicies", "e2e-second-replica")).ok


def test_an_admitted_excepted_workload_is_reported_excepted_by_the_cluster_audit(
    apiserver: EnvTest, webhook_server: WebhookServer, crds: list[str]
) -> None:
    """The server and `audit --cluster` read the same GPUPolicyExceptions: what the webhook let through
    because of one, the audit reports as excepted by it, not as passing nor failing."""
    where = "e2e-excepted-audit"
    apiserver.create_namespace(where)
    legacy = deployment("legacy-cuda", where, {})
    legacy["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert "no-visible-devices-without-gpu" in denial(apiserver.dry_run_create(legacy))
    # device access is not exceptable as shipped: the platform opts this rule back in (docs/day-two.md)
    opt_in = {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyOverlay",
        "metadata": {"name": "e2e-audit-device-exceptions"},
        "spec": {"rules": [{"name": "no-visible-devices-without-gpu", "exceptable": True}]},
    }
    create(apiserver, opt_in)
    lift = {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyException",
        "metadata": {"name": "legacy-image", "namespace": where},
        "spec": {
            "rules": ["no-visible-devices-without-gpu"],
            "match": {"kinds": ["Deployment"], "names": ["legacy-cuda"]},
            "reason": "the vendor image sets it; ticket OPS-1234",
        },
    }
    wait_for("the exception accepted", answer_when(lambda: apiserver.create(lift), lambda a: a.ok))
    stored = wait_for(
        f"the Deployment admitted under the exception\n{webhook_server.logs()}",
        answer_when(lambda: apiserver.create(legacy), lambda a: a.ok),
    )
    assert stored.body["metadata"]["name"] == "legacy-cuda"

    done = gpu_webhook(
        "audit", "--cluster", "--kubeconfig", str(apiserver.kubeconfig), "-n", where, "-o", "json", "--fail-on", "never"
    )
    (audited,) = [o for o in json.loads(done.stdout)["objects"] if o["name"] == "legacy-cuda"]
    (outcome,) = [r for r in audited["rules"] if r["rule"] == "no-visible-devices-without-gpu"]
    assert outcome["result"] == "excepted", audited
    assert f"excepted by {where}/legacy-image: the vendor image sets it" in json.dumps(outcome)
    apiserver.request("DELETE", path_of("gpupolicyoverlays", "e2e-audit-device-exceptions"))


def test_the_cluster_audit_judges_with_the_cluster_s_own_policies(apiserver: EnvTest, crds: list[str]) -> None:
    """`audit --cluster` loads the GPUPolicy objects with the files, as the server does: a workload stored
    before a site's policy existed is reported against it."""
    where = "e2e-audit-policies"
    apiserver.create_namespace(where)
    create(apiserver, deployment("before-the-policy", where, {DENY_LABEL: "yes"}))
    made = create(apiserver, policy("e2e-audited-rule", unlabelled(DENY_LABEL), "audited says no", ["Deployment"]))
    wait_for("Ready", ready_at(apiserver, "gpupolicies", "e2e-audited-rule", made["metadata"]["generation"]))
    try:
        done = gpu_webhook(
            "audit",
            "--cluster",
            "--kubeconfig",
            str(apiserver.kubeconfig),
            "-n",
            where,
            "-o",
            "json",
            "--fail-on",
            "never",
        )
    finally:
        assert apiserver.request("DELETE", path_of("gpupolicies", "e2e-audited-rule")).ok
    assert re.search(r"and \d+ policy objects? of the cluster", done.stderr), done.stderr
    (audited,) = [o for o in json.loads(done.stdout)["objects"] if o["name"] == "before-the-policy"]
    (outcome,) = [r for r in audited["rules"] if r["rule"] == "e2e-audited-rule"]
    assert outcome["result"] == "fail" and outcome["messages"] == ["audited says no"]
