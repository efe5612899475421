"""Read workloads from a live cluster, page by page, as raw JSON; and write PolicyReports back.

The cluster context (Namespaces, PriorityClasses, DRA claims and templates) is the server's own
(webhook.kube.ClusterCaches), listed once at the start instead of watched (`read_context`): the
audit builds each object's input with the server's `context`, so both judge a stored object alike.

The kubernetes client's generated models are skipped on purpose: deserialising a 100k-pod
list into model objects costs far more than evaluating them. Requests go through the
client's ApiClient (so kubeconfig, contexts, exec plugins and in-cluster config all work)
and each page is parsed with orjson. Pages are `limit` items long and followed with the
`continue` token, so memory holds one page at a time whatever the cluster's size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
from kubernetes import client as kube_client

from webhook.engine import KIND_TABLE
from webhook.kube import rest
from webhook.kube.caches import CONTEXT_RESOURCES, ClusterCaches  # noqa: F401 - the context's RBAC, for tests
from webhook.kube.connect import ClusterError, connect  # noqa: F401 - re-exported for the audit command

from .sources import Item


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" for the core API
    versions: tuple[str, ...]  # tried in order: the first one the cluster serves is used
    plural: str
    kind: str


# Every kind the rules look at, from the one table of workload kinds (webhook/engine/workloads.py).
# ResourceClaims and ResourceClaimTemplates are both: audited here (dra-claim-limits,
# dra-device-classes-allowed) and the context a DRA pod is judged with (read_context).
RESOURCES: tuple[Resource, ...] = tuple(Resource(k.group, k.versions, k.plural, k.kind) for k in KIND_TABLE)


class Api:
    """Just enough of the Kubernetes REST API for audits: GET pages, create and replace."""

    def __init__(self, api_client: kube_client.ApiClient) -> None:
        self.client = api_client

    def request(
        self, method: str, path: str, query: list[tuple[str, Any]] | None = None, body: Any = None
    ) -> tuple[int, Any]:
        try:
            response = rest.send(self.client, method, path, query, body)
        except Exception as error:  # urllib3 connection errors: name the server, not the stack
            raise ClusterError(f"{method} {path}: {error}") from None
        data = response.read()
        try:
            return response.status, orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            return response.status, None

    def pages(self, path: str, limit: int) -> Iterator[dict[str, Any]]:
        """Each page of a list; raises LookupError on 404 (a kind or namespace the cluster lacks)."""
        continue_from = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", limit)]
            if continue_from:
                query.append(("continue", continue_from))
            status, page = self.request("GET", path, query)
            if status == 404:
                raise LookupError(path)
            if status != 200 or not isinstance(page, dict):
                raise ClusterError(f"GET {path}: HTTP {status}: {_reason(page)}")
            yield page
            continue_from = (page.get("metadata") or {}).get("continue") or ""
            if not continue_from:
                return


def _reason(body: Any) -> str:
    return str(body.get("message")) if isinstance(body, dict) and body.get("message") else "no details"


def _collection(resource: Resource, version: str, namespace: str | None) -> str:
    base = f"/api/{version}" if not resource.group else f"/apis/{resource.group}/{version}"
    scope = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
    return f"{base}{scope}/{resource.plural}"


def policy_documents(api: Api) -> list[Any]:
    """The cluster's GPUPolicy, GPUPolicyOverlay and GPUPolicyException objects as loader documents, loaded
    with the rule files as the server loads them (none where the CRDs are not installed). ClusterError
    when they cannot be read."""
    from webhook.kube.policies import PolicyCaches
    from webhook.kube.policyobjects import policy_object

    return [policy_object(obj).document for obj in PolicyCaches(api.client).load().objects()]


def read_context(
    api: Api, namespace: str | None = None, limit: int = 500, note: Callable[[str, int], None] | None = None
) -> ClusterCaches:
    """The cluster context the server's watches hold, listed once (page by page): what the audit fills inputs from.

    Scoped to one namespace, only that Namespace and its DRA objects are read (PriorityClasses are
    cluster-wide). Resources the cluster does not serve or the caller may not list stay unknown, as
    in the server; `note(message, HTTP status)` names each. ClusterError when the Namespaces cannot be read.
    """
    return ClusterCaches(api.client).load(namespace, limit, note)


def _typed(item: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    # items of a list response carry no apiVersion/kind; the engine needs both to pick rules
    item.setdefault("apiVersion", api_version)
    item.setdefault("kind", kind)
    return item


def owned_by_workload(obj: Mapping[str, Any]) -> bool:
    """Made by a controller whose own template is audited (a Deployment's ReplicaSet, a Job's Pod).

    A pod's ResourceClaim made from a ResourceClaimTemplate by the resourceclaim controller (owned
    by the Pod, its spec the template's) counts too: the template is audited.
    """
    claim = obj.get("kind") == "ResourceClaim"
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller") and (
            owner.get("kind") in KIND_TABLE.autogen or (claim and owner.get("kind") == "Pod")
        ):
            return True
    return False


Progress = Callable[[str, int, int | None], None]  # kind, items in this page, items still to come


def read_workloads(
    api: Api,
    namespace: str | None = None,
    include_owned: bool = False,
    limit: int = 500,
    resources: Iterable[Resource] = RESOURCES,
    progress: Progress | None = None,
    skipped: Callable[[str], None] | None = None,
) -> Iterator[Item]:
    """Every workload of the audited kinds, page by page; kinds the cluster does not serve are skipped."""
    for resource in resources:
        for version in resource.versions:
            api_version = f"{resource.group}/{version}" if resource.group else version
            try:
                for page in api.pages(_collection(resource, version, namespace), limit):
                    items = page.get("items") or []
                    if progress is not None:
                        progress(resource.kind, len(items), (page.get("metadata") or {}).get("remainingItemCount"))
                    for item in items:
                        obj = _typed(item, api_version, resource.kind)
                        if include_owned or not owned_by_workload(obj):
                            yield Item(obj, f"cluster {api_version}")
                break  # this version is served: do not list the same objects again in an older one
            except LookupError:
                continue
        else:
            if skipped is not None:
                skipped(resource.kind)


def apply_report(api: Api, report: dict[str, Any]) -> str:
    """Create the PolicyReport, or replace the one already there; returns `created` or `replaced`."""
    group_version = report["apiVersion"]
    metadata = report["metadata"]
    plural = "policyreports" if report["kind"] == "PolicyReport" else "clusterpolicyreports"
    scope = f"/namespaces/{quote(metadata['namespace'], safe='')}" if metadata.get("namespace") else ""
    collection = f"/apis/{group_version}{scope}/{plural}"
    item = f"{collection}/{quote(metadata['name'], safe='')}"
    status, current = api.request("GET", item)
    if status == 404:
        status, body = api.request("POST", collection, body=report)
        outcome = "created"
    elif status == 200:
        version = ((current or {}).get("metadata") or {}).get("resourceVersion")
        body_to_send = {**report, "metadata": {**metadata, "resourceVersion": version}}
        status, body = api.request("PUT", item, body=body_to_send)
        outcome = "replaced"
    else:
        raise ClusterError(f"GET {item}: HTTP {status}: {_reason(current)}")
    if status == 404 and api.request("GET", f"/apis/{group_version}")[0] == 404:
        # the API itself is not served: the GET above could not tell that from a report not written yet
        raise ClusterError(
            f"this cluster does not serve {group_version} (the PolicyReport CRDs are not installed): install the "
            "policy working group's PolicyReport CRDs (kubernetes-sigs/wg-policy-prototypes; Kyverno installs "
            "them too), or leave out --apply to write the reports to stdout"
        )
    if status not in (200, 201):
        raise ClusterError(f"writing {item}: HTTP {status}: {_reason(body)}")
    return outcome
