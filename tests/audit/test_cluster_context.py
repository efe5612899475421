"""`audit --cluster` judges stored objects with the server's cluster context: Namespaces,
PriorityClasses, ResourceClaims and ResourceClaimTemplates, read through webhook.kube.ClusterCaches
(listed once, page by page) and filled into each input by the server's own `fill`.

The stored pods here look as the apiserver stores them: the Priority admission plugin wrote the
globalDefault class's name, `priority` and `preemptionPolicy` into every pod that named no class.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.audit.conftest import PACK_RULES
from tests.support.apistub import ApiStub
from tests.support.kubestub import CLAIM_TEMPLATES, PRIORITY_CLASSES, KubeStub
from webhook.audit.cluster import Api, read_context
from webhook.audit.context import NamespaceContext
from webhook.engine import Phase, evaluate, load_rules
from webhook.kube import ClusterCaches
from webhook.review import parse_review
from webhook.server.context import request_snapshot

TENANT = "team-llm"
DEFAULT_CLASS = "cluster-default"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"


def priority_class(name: str, value: int, default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
        "preemptionPolicy": "PreemptLowerPriority",
    }


def stored_pod(name: str, gpus: int = 1, claims: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    """A GPU pod as stored: the Priority plugin resolved the cluster's default class into it."""
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = str(gpus)
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.0", "resources": resources}
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "priorityClassName": DEFAULT_CLASS,
        "priority": 1000,
        "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        **spec,
    }
    if claims:
        pod_spec["resourceClaims"] = claims
        container["resources"]["claims"] = [{"name": c["name"]} for c in claims]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": TENANT}, "spec": pod_spec}


def claim_spec(device_class: str = "gpu.nvidia.com", **exactly: Any) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class, **exactly}}]}}


def claim_template(name: str, **exactly: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {"spec": claim_spec(**exactly)},
    }


@pytest.fixture
def cluster(tmp_path) -> Iterator[ApiStub]:
    """A tenant namespace, three PriorityClasses (one globalDefault), stored pods and DRA objects."""
    api = ApiStub()
    api.add_namespace(TENANT, {"gpu-webhook.io/tenant": "true", "team": "llm", "cost-center": "cc-4711"})
    api.add_namespace("team-other", {"gpu-webhook.io/tenant": "true"})
    for pc in (
        priority_class(DEFAULT_CLASS, 1000, True),
        priority_class("gpu-batch", 100),
        priority_class("gpu-critical", 10000),
    ):
        api.add(pc, plural="priorityclasses")
    api.add(stored_pod("plain"))
    api.add(stored_pod("batch", priorityClassName="gpu-batch", priority=100))
    api.add(stored_pod("dra", gpus=0, claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]))
    api.add(claim_template("one-gpu"))
    api.add(claim_template("whole-node", allocationMode="All"))  # denied by dra-claim-limits in a tenant
    # the claim the resourceclaim controller made for pod `dra` from its template: owned by the Pod
    made = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "dra-gpu-x7k2p",
            "namespace": TENANT,
            "annotations": {POD_CLAIM_NAME: "gpu"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "dra", "uid": "u1", "controller": True}],
        },
        "spec": claim_spec(),
    }
    api.add(made)
    for group_version, plural in (("apps/v1", "deployments"), ("batch/v1", "jobs")):
        api.serve(group_version, plural)
    with api.running():
        api.kubeconfig(tmp_path / "kubeconfig")
        yield api


def audited(out: str) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['name']}": o for o in json.loads(out)["objects"]}


def denied_by(entry: dict[str, Any]) -> set[str]:
    """The rules for which the apiserver would refuse the object (Deny failures, errors under Fail)."""
    return {r["rule"] for r in entry["rules"] if r.get("blocks")}


def run_cluster_audit(run, tmp_path, *args: str) -> tuple[int, dict[str, dict[str, Any]], str]:
    code, out, err = run(
        "--cluster", "--kubeconfig", str(tmp_path / "kubeconfig"), "--rules", PACK_RULES, "-o", "json", *args
    )
    return code, audited(out), err


def test_stored_pods_with_the_default_class_and_dra_templates_are_judged_as_the_server_judged_them(
    run, cluster, tmp_path
):
    code, objects, err = run_cluster_audit(run, tmp_path)

    # the cause of the false denials: without the cluster's PriorityClasses `defaultPriorityClass`
    # was null, priority-class-allowed fell back to params.clusterDefault ('') and the class the
    # Priority plugin wrote into every pod was "not allowed"; and the pods ran before the
    # ResourceClaimTemplates were listed, so a DRA pod's template was "missing"
    for name in ("Pod/plain", "Pod/batch", "Pod/dra"):
        assert denied_by(objects[name]) == set(), (name, objects[name]["rules"])
    assert "ResourceClaimTemplate/one-gpu" in objects  # audited as an object, and context for Pod/dra
    assert denied_by(objects["ResourceClaimTemplate/one-gpu"]) == set()
    assert denied_by(objects["ResourceClaimTemplate/whole-node"]) == {"dra-claim-limits"}
    # the pod's own claim is the template's copy: audited with --include-owned only
    assert "ResourceClaim/dra-gpu-x7k2p" not in objects
    assert code == 1 and "priorityclasses" not in err  # 1: whole-node


def test_context_is_listed_first_page_by_page_and_once(run, cluster, tmp_path):
    run_cluster_audit(run, tmp_path, "--page-size", "2")

    classes = [r for r in cluster.requests if r.startswith("GET /apis/scheduling.k8s.io/v1/priorityclasses")]
    assert len(classes) == 2 and all("limit=2" in r for r in classes) and "continue=" in classes[1]  # 3 classes
    first_pods = next(i for i, r in enumerate(cluster.requests) if r.startswith("GET /api/v1/pods"))
    context = [
        r.split("?")[0]
        for r in cluster.requests[:first_pods]
        if "continue=" not in r  # the first page of each
    ]
    assert context == [
        # the rules the cluster holds (none served here), loaded with the files before anything is judged
        "GET /apis/gpu-webhook.io/v1alpha1/gpupolicies",
        "GET /apis/gpu-webhook.io/v1alpha1/gpupolicyoverlays",
        "GET /api/v1/namespaces",
        "GET /apis/scheduling.k8s.io/v1/priorityclasses",
        "GET /apis/resource.k8s.io/v1/resourceclaims",
        "GET /apis/resource.k8s.io/v1/resourceclaimtemplates",
        "GET /apis/gpu-webhook.io/v1alpha1/gpupolicyexceptions",  # none served here: no exception applies
        # Kueue's queues and flavors (`kueueQueues`): not served here, and neither is the group (a 404
        # of each, then of kueue.x-k8s.io: Kueue is not installed), so no queues
        "GET /apis/kueue.x-k8s.io/v1beta1/localqueues",
        "GET /apis/kueue.x-k8s.io",
        "GET /apis/kueue.x-k8s.io/v1beta1/clusterqueues",
        "GET /apis/kueue.x-k8s.io",
        "GET /apis/kueue.x-k8s.io/v1beta1/resourceflavors",
        "GET /apis/kueue.x-k8s.io",
    ]
    # DRA objects are both: listed once more, as audited objects, after the context
    assert sum(r.startswith("GET /apis/resource.k8s.io/v1/resourceclaimtemplates") for r in cluster.requests) == 2


def test_owned_claims_with_include_owned(run, cluster, tmp_path):
    _, objects, _ = run_cluster_audit(run, tmp_path, "--include-owned")
    assert denied_by(objects["ResourceClaim/dra-gpu-x7k2p"]) == set()


def test_one_namespace_reads_its_own_context(run, cluster, tmp_path):
    _, objects, _ = run_cluster_audit(run, tmp_path, "-n", TENANT)

    assert denied_by(objects["Pod/plain"]) == set() and denied_by(objects["Pod/dra"]) == set()
    assert f"GET /api/v1/namespaces/{TENANT}" in cluster.requests
    assert not any(r.startswith("GET /api/v1/namespaces?") for r in cluster.requests)  # no list of all namespaces
    scoped = f"GET /apis/resource.k8s.io/v1/namespaces/{TENANT}/resourceclaimtemplates"
    assert sum(r.startswith(scoped) for r in cluster.requests) == 2  # context, then the audited objects


def test_forbidden_priority_classes_are_said_and_leave_the_classes_unknown(run, cluster, tmp_path):
    cluster.forbidden.add("scheduling.k8s.io/v1/priorityclasses")

    _, objects, err = run_cluster_audit(run, tmp_path)

    assert "priorityclasses.scheduling.k8s.io: HTTP 403 Forbidden" in err and "unknown" in err
    # unknown classes: the rule can only fall back to params.clusterDefault, as a server without the watch
    assert "priority-class-allowed" in denied_by(objects["Pod/plain"])
    assert denied_by(objects["Pod/batch"]) == set()  # gpu-batch is in params.allowed


def test_unserved_dra_is_quiet_and_unknown(run, cluster, tmp_path):
    for plural in ("resourceclaims", "resourceclaimtemplates"):
        del cluster.collections[f"resource.k8s.io/v1/{plural}"]

    _, objects, err = run_cluster_audit(run, tmp_path)

    assert "resourceclaim" not in err  # a cluster before 1.34: not served, like a missing workload kind
    # unknown claims, as in the server: no devices counted, yet a GPU pod (its GPU toleration is no CPU
    # pod's), and its one missing template is one it may wait for (dra-pod-claims-resolvable's header)
    assert objects["Pod/dra"]["gpus"] == 0
    assert denied_by(objects["Pod/dra"]) == set()
    assert denied_by(objects["Pod/plain"]) == set()


# -- the same context as the server: its watch caches against a stand-in that also watches ------------


def api_client(url: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


def review(obj: dict[str, Any]) -> bytes:
    metadata = obj["metadata"]
    group, _, version = obj["apiVersion"].rpartition("/")
    request = {
        "uid": "u",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
        "name": metadata["name"],
        "namespace": metadata["namespace"],
        "operation": "CREATE",
        "userInfo": {},
        "object": obj,
        "dryRun": False,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def test_the_audit_input_is_the_servers_input():
    stub = KubeStub().start()
    watched = None
    try:
        stub.add(TENANT, labels={"gpu-webhook.io/tenant": "true", "team": "llm"})
        for pc in (priority_class(DEFAULT_CLASS, 1000, True), priority_class("gpu-batch", 100)):
            stub.put(PRIORITY_CLASSES, pc)
        stub.put(CLAIM_TEMPLATES, claim_template("one-gpu"))
        watched = ClusterCaches(api_client(stub.url), backoff_initial=0.01)
        watched.start()
        assert all(cache.wait_synced(5) for cache in watched.caches)
        listed = read_context(Api(api_client(stub.url)), limit=1)
        ruleset = load_rules(PACK_RULES).require()
        audit_door = NamespaceContext(cluster=listed)

        for pod in (
            stored_pod("plain"),
            stored_pod("dra", 0, [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]),
        ):
            parsed = parse_review(review(pod))
            context = asyncio.run(request_snapshot(watched, parsed))
            server = parsed.to_input(context.namespace_object, context.cluster)
            audit = audit_door.admission(json.loads(json.dumps(pod)))
            for field in (
                "namespace",
                "namespace_object",
                "priority_classes",
                "resource_claims",
                "resource_claim_templates",
            ):
                assert getattr(audit, field) == getattr(server, field), field
            assert audit.priority_classes and audit.resource_claim_templates  # not two empty contexts
            decided = [evaluate(ruleset, admission, Phase.ALL) for admission in (server, audit)]
            assert [d.allowed for d in decided] == [True, True], [d.violations for d in decided]
            assert decided[0].patch == decided[1].patch
    finally:
        if watched is not None:
            watched.stop()
        stub.stop()
