"""manifests/components/api-fairness on kube-apiserver v1.36.2: which requests its FlowSchema takes.

The apiserver names the FlowSchema and the priority level of every answer in two headers,
X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID
(https://kubernetes.io/docs/reference/debug-cluster/flow-control/#diagnostics), so the test reads the
classification of real requests instead of trusting the YAML.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import gpu_pod
from tests.e2e.test_policy_objects import GROUP_VERSION, crds, wait_for  # noqa: F401 (crds: a fixture)
from tests.support import REPO
from tests.support.envtest import EnvTest

COMPONENT = REPO / "manifests/components/api-fairness/flowcontrol.yaml"
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
NAMESPACE = "e2e-fairness"
APPROVER = "e2e-namespace-approver"


@pytest.fixture(scope="module")
def fairness(apiserver: EnvTest) -> Iterator[dict[str, str]]:
    """The component applied: kind -> the uid of its object, once the FlowSchema is not dangling."""
    uids: dict[str, str] = {}
    paths = []
    for document in yaml.safe_load_all(COMPONENT.read_text()):
        made = apiserver.create(document)
        assert made.ok, (made.status, made.message)
        uids[document["kind"]] = made.body["metadata"]["uid"]
        paths.append(f"{FLOWCONTROL}/{document['kind'].lower()}s/{document['metadata']['name']}")

    def resolved() -> bool:
        status = apiserver.request("GET", paths[1]).body.get("status") or {}
        return any(c["type"] == "Dangling" and c["status"] == "False" for c in status.get("conditions") or [])

    wait_for("the FlowSchema names its priority level", resolved)
    apiserver.create_namespace(NAMESPACE)
    # the approver may create exceptions there, as the shipped exception-admin role lets it: an
    # authorized request has its body read, where a refused one's large body would be cut off
    # (the apiserver answers 403 and closes the connection under the client still sending)
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + NAMESPACE
    for document in (
        {
            "kind": "Role",
            "rules": [{"apiGroups": ["gpu-webhook.io"], "resources": ["gpupolicyexceptions"], "verbs": ["create"]}],
        },
        {
            "kind": "RoleBinding",
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": APPROVER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": APPROVER}],
        },
    ):
        body = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "metadata": {"name": APPROVER, "namespace": NAMESPACE},
            **document,
        }
        made = apiserver.create(body)
        assert made.ok or made.status == 409, (made.status, made.message)
        paths.append(f"{rbac}/{document['kind'].lower()}s/{APPROVER}")
    yield uids
    for path in reversed(paths):
        apiserver.request("DELETE", path)


def as_approver(apiserver: EnvTest) -> Callable[..., Any]:
    """Requests as a namespace user (impersonated): classification comes before authorization."""

    def call(method: str, path: str, body: Any = None) -> Any:
        return apiserver.request(method, path, body, {"dryRun": "All"}, headers={"Impersonate-User": APPROVER})

    return call


def exception(name: str, rules: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyException",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"rules": rules, "reason": "fairness"},
    }


def test_a_namespace_users_policy_object_writes_queue_in_their_own_level(
    apiserver: EnvTest,
    crds: list[str],  # noqa: F811 (the fixture)
    fairness: dict[str, str],
) -> None:
    call = as_approver(apiserver)
    collection = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/gpupolicyexceptions"
    # an oversized dry-run exception, the namespace approver's attack: classified before it is decoded
    huge = call("POST", collection, exception("e2e-huge", [f"near-miss-{i:05d}" for i in range(20_000)]))
    assert huge.status == 422, huge.status  # read whole and refused by the CRD's bounds, in its own level
    assert huge.flow_schema_uid == fairness["FlowSchema"], huge.status
    assert huge.priority_level_uid == fairness["PriorityLevelConfiguration"]
    policy = {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicy",
        "metadata": {"name": "e2e-fairness"},
        "spec": {"match": {"kinds": ["Pod"]}, "validate": {"expression": "true", "message": "never"}},
    }
    assert call("POST", f"/apis/{GROUP_VERSION}/gpupolicies", policy).flow_schema_uid == fairness["FlowSchema"]


def test_reads_status_writes_and_pod_creates_keep_their_levels(
    apiserver: EnvTest,
    crds: list[str],  # noqa: F811 (the fixture)
    fairness: dict[str, str],
) -> None:
    call = as_approver(apiserver)
    others = [
        call("GET", f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/gpupolicyexceptions"),  # a read (the server's watch)
        call("PUT", f"/apis/{GROUP_VERSION}/gpupolicies/e2e-fairness/status", {}),  # the server's status writes
        call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", gpu_pod("e2e-fairness", NAMESPACE)),  # a tenant's pod
    ]
    for answer in others:
        assert answer.flow_schema_uid is not None  # APF is on: every answer is classified
        assert answer.flow_schema_uid != fairness["FlowSchema"], answer.status
