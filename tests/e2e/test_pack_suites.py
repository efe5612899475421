"""Every case of the pack's GPUPolicyTest suites, through a real kube-apiserver and the running webhook.

`gpu-webhook test` decides a case with the engine alone; here the same object goes where a user's
would: the rendered webhook configurations (their rules and matchConditions decide whether we are
called at all), the apiserver's own defaulting and admission plugins, our /mutate, the apiserver's
validation, our /validate. The verdict and the patched object must be the engine's:

- the reference is the engine's decision on the case with the context the server really has: the
  Namespace as the apiserver stores it (labels plus kubernetes.io/metadata.name), the case's
  cluster objects (PriorityClasses, ResourceClaims, templates) created for real, and the user the
  request is made as (impersonated, when the case names one);
- allowed by the engine: the apiserver admits it (a server-side dry run), and every field the
  engine's patch sets holds the engine's value in the object the apiserver would store;
- denied by the engine: the apiserver refuses it, naming each rule that denies; or the apiserver
  refuses it itself first (422), as it does for extended resources whose request differs from the
  limit (its validation runs before validating webhooks, DESIGN §5);
- UPDATE cases: the old object is stored first (with the webhooks out of the way, as an object
  admitted before the rules existed), then the update is dry-run against it.

The server sees cluster objects through watch caches: before each request the test waits until
every cache has seen a marker written after the case's context (resourceVersions only grow).
"""

from __future__ import annotations

import copy
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import jsonpointer
import pytest
import yaml

from tests.e2e.conftest import WebhookServer
from tests.support import RULES
from tests.support.cluster import cluster_dir
from tests.support.envtest import EnvTest, Response
from webhook.authoring.suite import Suite, admission, discover
from webhook.engine import Decision, Phase, RuleSet, evaluate

SYNC = "e2e-sync"  # a namespace and a PriorityClass that only mark time for the caches
NAME_LABEL = "kubernetes.io/metadata.name"
CACHES = {
    "namespace": ("/api/v1/namespaces/e2e-sync", "v1", "Namespace"),
    "priorityclass": ("/apis/scheduling.k8s.io/v1/priorityclasses/e2e-sync", "scheduling.k8s.io/v1", "PriorityClass"),
    "resourceclaimtemplate": (
        "/apis/resource.k8s.io/v1/namespaces/e2e-sync/resourceclaimtemplates/e2e-sync",
        "resource.k8s.io/v1",
        "ResourceClaimTemplate",
    ),
    "resourceclaim": (
        "/apis/resource.k8s.io/v1/namespaces/e2e-sync/resourceclaims/e2e-sync",
        "resource.k8s.io/v1",
        "ResourceClaim",
    ),
    # Kueue's, behind `kueueQueues` (its CRDs installed by the `kueue` fixture)
    "localqueue": (
        "/apis/kueue.x-k8s.io/v1beta1/namespaces/e2e-sync/localqueues/e2e-sync",
        "kueue.x-k8s.io/v1beta1",
        "LocalQueue",
    ),
    "clusterqueue": ("/apis/kueue.x-k8s.io/v1beta1/clusterqueues/e2e-sync", "kueue.x-k8s.io/v1beta1", "ClusterQueue"),
    "resourceflavor": (
        "/apis/kueue.x-k8s.io/v1beta1/resourceflavors/e2e-sync",
        "kueue.x-k8s.io/v1beta1",
        "ResourceFlavor",
    ),
}
CLUSTER_SCOPED = {"PriorityClass", "ClusterQueue", "ResourceFlavor"}  # of the kinds suites give as cluster objects
KUEUE_MARKERS = {  # the markers' specs, valid for Kueue's own CRDs
    "LocalQueue": {"clusterQueue": SYNC},
    "ClusterQueue": {
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": SYNC, "resources": [{"name": "cpu", "nominalQuota": 0}]}],
            }
        ]
    },
    "ResourceFlavor": {},
}
DRA_SPEC = {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "e2e-sync"}}]}}
MARKER_PRIORITY_CLASS = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": SYNC},
    "value": 0,
}


def suite_cases() -> Iterator[Any]:
    for suite in discover(str(RULES)):
        for case in suite.cases:
            yield pytest.param(suite, case, id=f"{Path(suite.file).stem}::{case['name']}")


class Cluster:
    """The apiserver's state for one case at a time: its namespace, its cluster objects, caches in step."""

    def __init__(self, apiserver: EnvTest, server: WebhookServer, manifests: list[dict[str, Any]]) -> None:
        self.api = apiserver
        self.server = server
        self.manifests = manifests
        self.context: list[tuple[str, dict[str, Any]]] = []  # (path, object) created for the current case
        self.tick = 0
        for body in [impersonated_users_may_write(), *runtime_classes()]:
            made = self.api.create(body)
            assert made.ok or made.status == 409, made.message
        if self.api.request("GET", "/api/v1/namespaces/" + SYNC).status == 404:
            self.api.create_namespace(SYNC)
        for _path, api_version, kind in list(CACHES.values())[1:]:
            body: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {"name": SYNC}}
            if kind == "PriorityClass":
                body = copy.deepcopy(MARKER_PRIORITY_CLASS)
            elif kind in KUEUE_MARKERS:
                body["spec"] = copy.deepcopy(KUEUE_MARKERS[kind])
                if kind == "LocalQueue":
                    body["metadata"]["namespace"] = SYNC
            else:
                body["metadata"]["namespace"] = SYNC
                body["spec"] = {"spec": DRA_SPEC} if kind == "ResourceClaimTemplate" else DRA_SPEC
            made = self.api.create(body)
            assert made.ok or made.status == 409, made.message

    # -- context ----------------------------------------------------------------------------------
    def namespace(self, name: str, wanted: dict[str, Any] | None) -> dict[str, Any]:
        """The namespace with exactly the case's labels and annotations; the stored object."""
        metadata = (wanted or {}).get("metadata") or {}
        labels = {**(metadata.get("labels") or {}), NAME_LABEL: name}
        annotations = dict(metadata.get("annotations") or {})
        path = f"/api/v1/namespaces/{name}"
        current = self.api.request("GET", path)
        if current.status == 404:
            return self.api.create_namespace(name, labels, annotations)
        # kube-system and default exist from the start, without the ServiceAccount pods need
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}}
        made = self.api.create(account)
        assert made.ok or made.status == 409, made.message
        stored = current.body
        if (stored["metadata"].get("labels") or {}) == labels and (
            stored["metadata"].get("annotations") or {}
        ) == annotations:
            return dict(stored)
        stored["metadata"]["labels"] = labels
        stored["metadata"]["annotations"] = annotations
        answer = self.api.request("PUT", path, stored)
        assert answer.ok, answer.message
        return dict(answer.body)

    def cluster_objects(self, objects: list[dict[str, Any]], namespace: str) -> None:
        """Exactly the case's cluster objects: the PriorityClasses of the cluster (other tests' too, but
        the built-in system-* and the marker) are the case's alone, as its reference assumes."""
        for path, _ in reversed(self.context):
            self.api.request("DELETE", path, query={"gracePeriodSeconds": "0"})
        self.context = []
        listed = self.api.request("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")
        for item in listed.body["items"]:
            name = item["metadata"]["name"]
            if not name.startswith("system-") and name != SYNC:
                self.api.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
        for obj in objects:
            body = copy.deepcopy(obj)
            if body["kind"] not in CLUSTER_SCOPED:
                body["metadata"].setdefault("namespace", namespace)
                other = body["metadata"]["namespace"]
                if other != namespace and self.api.request("GET", f"/api/v1/namespaces/{other}").status == 404:
                    self.api.create_namespace(other)  # another namespace's object (a queue of the same name)
            made = self.api.create(body)
            if made.status == 403 and OUR_DENIAL.search(made.message or ""):
                # context a case needs that the rules deny (a claim another case's pod refers to):
                # stored as if it had been created before the rules
                self.store_without_webhooks(body)
            else:
                assert made.ok, (
                    f"cluster object {body['kind']}/{body['metadata']['name']}: {made.status} {made.message}"
                )
            self.context.append((self._item_path(body), body))

    def _item_path(self, body: dict[str, Any]) -> str:
        namespace = body["metadata"].get("namespace")
        collection = self.api.resource_path(body["apiVersion"], body["kind"], namespace)
        return f"{collection}/{urllib.parse.quote(body['metadata']['name'])}"

    def in_step(self, timeout: float = 10.0) -> None:
        """Until every watch cache of the server has seen a write made now (after the case's context)."""
        self.tick += 1
        wanted: dict[str, int] = {}
        for cache, (path, _, _) in CACHES.items():
            current = self.api.request("GET", path)
            assert current.ok, f"{path}: {current.message}"
            body = current.body
            body["metadata"].setdefault("labels", {})["e2e-tick"] = str(self.tick)
            answer = self.api.request("PUT", path, body)
            assert answer.ok, f"{path}: {answer.message}"
            wanted[cache] = int(answer.body["metadata"]["resourceVersion"])
        deadline = time.monotonic() + timeout
        while True:
            _status, text = self.server.get("/readyz")
            caches = _json(text).get("namespaces", {}).get("caches", {})
            behind = {c: v for c, v in wanted.items() if int(caches.get(c, {}).get("resourceVersion") or 0) < v}
            if not behind:
                return
            assert time.monotonic() < deadline, f"caches behind {behind}: {caches}\n{self.server.logs()}"
            time.sleep(0.02)

    # -- UPDATE cases -----------------------------------------------------------------------------
    def store_without_webhooks(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` as if it had been admitted before the rules existed: the webhooks are removed
        for the write and installed again (as rendered), then seen to be called once more."""
        paths = [
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpu-webhook-mutating",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpu-webhook-validating",
        ]
        for path in paths:
            assert self.api.request("DELETE", path).ok
        try:
            made = self.api.create(obj)
            assert made.ok, f"storing the old object: {made.status} {made.message}"
        finally:
            self.api.install_webhooks(self.manifests, self.server.url, self.server.ca_pem)
        self._wait_for_webhooks()
        return dict(made.body)

    def _wait_for_webhooks(self) -> None:
        before = self.server.answered("validate")
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": SYNC},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
        self.api.wait_for_webhooks(probe, lambda _answer: self.server.answered("validate") > before)

    def delete(self, obj: dict[str, Any]) -> None:
        self.api.request("DELETE", self._item_path(obj), query={"gracePeriodSeconds": "0"})


def impersonated_users_may_write() -> dict[str, Any]:
    """The users the cases impersonate (their userInfo) may write what they send: the rules, not RBAC,
    are under test. Bound by name: other tests check what real service accounts may do."""
    users = sorted(
        {case["userInfo"]["username"] for suite in discover(str(RULES)) for case in suite.cases if case.get("userInfo")}
    )
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "e2e-impersonated-users"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user} for user in users],
    }


def runtime_classes() -> list[dict[str, Any]]:
    """A RuntimeClass for every runtimeClassName the suites use (the RuntimeClass plugin refuses a pod
    that names one the cluster does not have)."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("runtimeClassName"), str):
                names.add(node["runtimeClassName"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for suite in discover(str(RULES)):
        walk(suite.cases)
    return [
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": name}
        for name in sorted(names)
    ]


def _json(text: str) -> dict[str, Any]:
    import json

    try:
        return json.loads(text)
    except ValueError:
        return {}


def kueue_crds() -> list[dict[str, Any]]:
    """Kueue's LocalQueue, ClusterQueue and ResourceFlavor CRDs: Kueue v0.13.1's own from the cluster
    layer's assets when they are here, else the same names with an open schema."""
    found = cluster_dir()
    if found is not None and (found / "kueue" / "crd").is_dir():
        files = ("localqueues", "clusterqueues", "resourceflavors")
        return [yaml.safe_load((found / "kueue" / "crd" / f"kueue.x-k8s.io_{f}.yaml").read_text()) for f in files]
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return [
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
            "spec": {
                "group": "kueue.x-k8s.io",
                "scope": scope,
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                "versions": [
                    {"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
                ],
            },
        }
        for plural, kind, scope in (
            ("localqueues", "LocalQueue", "Namespaced"),
            ("clusterqueues", "ClusterQueue", "Cluster"),
            ("resourceflavors", "ResourceFlavor", "Cluster"),
        )
    ]


@pytest.fixture(scope="module")
def kueue(apiserver: EnvTest, webhook_server: WebhookServer) -> Iterator[None]:
    """Kueue's CRDs for the cases' queues, and the server seen to read them; deleted afterwards (the
    session's other modules run on an apiserver without Kueue)."""
    names = []
    for crd in kueue_crds():
        made = apiserver.create(crd)
        assert made.ok or made.status == 409, made.message
        names.append(crd["metadata"]["name"])
    for name in names:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        deadline = time.monotonic() + 30
        while not any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (apiserver.request("GET", path).body or {}).get("status", {}).get("conditions") or []
        ):
            assert time.monotonic() < deadline, f"CRD {name} not Established"
            time.sleep(0.1)
    deadline = time.monotonic() + 40  # the caches look for Kueue again every 10 s
    while True:
        caches = _json(webhook_server.get("/readyz")[1]).get("namespaces", {}).get("caches", {})
        if all(caches.get(c, {}).get("served") for c in ("localqueue", "clusterqueue", "resourceflavor")):
            break
        assert time.monotonic() < deadline, f"the server does not read Kueue's kinds: {caches}"
        time.sleep(0.2)
    yield
    for name in names:
        apiserver.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")


@pytest.fixture(scope="module")
def cluster(
    apiserver: EnvTest,
    webhook_server: WebhookServer,
    manifests: list[dict[str, Any]],
    webhooks: list[str],
    workload_crds: list[str],
    kueue: None,
) -> Cluster:
    return Cluster(apiserver, webhook_server, manifests)


def impersonated(apiserver: EnvTest, user: dict[str, Any] | None) -> dict[str, str]:
    if not user:
        return {}
    headers = {"Impersonate-User": user["username"]}
    for group in user.get("groups") or []:
        headers.setdefault("Impersonate-Group", group)  # one group suffices for what the rules read
    return headers


def send(apiserver: EnvTest, obj: dict[str, Any], operation: str, user: dict[str, Any] | None) -> Response:
    """A server-side dry run of the case's request, as the case's user when it names one."""
    namespace = obj["metadata"].get("namespace")
    collection = apiserver.resource_path(obj["apiVersion"], obj["kind"], namespace)
    path = collection if operation == "CREATE" else f"{collection}/{urllib.parse.quote(obj['metadata']['name'])}"
    method = "POST" if operation == "CREATE" else "PUT"
    return apiserver.request(method, path, obj, {"dryRun": "All"}, headers=impersonated(apiserver, user))


OUR_DENIAL = re.compile(r'admission webhook "[a-z-]+\.gpu-webhook\.io" denied the request')


def denying_rules(decision: Decision) -> set[str]:
    return {v.rule for v in decision.violations}


def contains(expected: Any, actual: Any) -> bool:
    """`actual` holds `expected`: maps key by key, lists item by item in any order (the apiserver adds
    its own items, e.g. the not-ready tolerations), everything else equal."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and contains(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and all(any(contains(e, a) for a in actual) for e in expected)
    return expected == actual


def patched_paths(decision: Decision) -> Iterator[str]:
    for operation in decision.patch:
        if operation["op"] in ("add", "replace"):
            path = operation["path"]
            yield path.removesuffix("/-")


@pytest.mark.parametrize(("suite", "case"), list(suite_cases()))
def test_the_case_gets_the_engines_verdict_through_the_apiserver(
    suite: Suite, case: dict[str, Any], cluster: Cluster, pack: RuleSet
) -> None:
    offline = admission(case, Path(suite.file).parent)
    obj = copy.deepcopy(offline.object or {})
    namespace = offline.namespace
    obj.setdefault("metadata", {})["namespace"] = namespace
    stored_namespace = cluster.namespace(namespace, case.get("namespaceObject"))
    cluster_objects = list(case.get("clusterObjects") or [])
    cluster.cluster_objects(cluster_objects, namespace)
    old = None
    if offline.operation == "UPDATE":
        old_body = copy.deepcopy(offline.old_object or {})
        old_body["metadata"]["namespace"] = namespace
        old = cluster.store_without_webhooks(old_body)
        # the update a client makes: the stored object (defaults and plugins' additions included)
        # with the case's change, e.g. `kubectl label` or `kubectl edit`
        change = jsonpatch.make_patch(old_body, obj)
        obj = change.apply(copy.deepcopy(old))
    cluster.in_step()
    try:
        answer = send(cluster.api, obj, offline.operation, case.get("userInfo"))
    finally:
        if old is not None:
            cluster.delete(old)

    # the engine, with the context the server has: the stored namespace, the cluster's objects
    real = {**case, "namespaceObject": stored_namespace, "clusterObjects": [*cluster_objects, MARKER_PRIORITY_CLASS]}
    if old is not None:
        real["object"], real["oldObject"] = obj, old  # the update as sent, against the stored object
    reference = evaluate(pack, admission(real, Path(suite.file).parent))
    where = f"{answer.status} {answer.message or ''}"
    if reference.allowed:
        assert answer.ok, f"the engine admits it, the apiserver answered {where}"
        returned = answer.body
        for path in patched_paths(reference):
            assert reference.mutated is not None
            want = jsonpointer.resolve_pointer(reference.mutated, path)
            got = jsonpointer.resolve_pointer(returned, path, None)
            assert contains(want, got), f"{path}: the engine sets {want!r}, the apiserver would store {got!r}"
        return
    assert not answer.ok, f"the engine denies it ({reference.denial_message}), the apiserver admitted it"
    if OUR_DENIAL.search(answer.message or ""):
        named = set(re.findall(r"\[([a-z0-9-]+)\]", answer.message or ""))
        # a rule that errors under Fail while mutating denies at /mutate: /validate never runs then
        mutating = evaluate(pack, admission(real, Path(suite.file).parent), Phase.MUTATE)
        expected = denying_rules(mutating) if not mutating.allowed else denying_rules(reference)
        assert expected <= named, f"denied by {named}, the engine denies with {expected}"
    else:
        # refused by the apiserver itself before our validating webhook could say why
        assert answer.status == 422, f"refused, but neither by gpu-webhook nor by validation: {where}"
