"""Watch caches of the policy objects (GPUPolicy, GPUPolicyOverlay; GPUPolicyException: caches.py), on watchcache.py.

A cluster where the CRDs are not installed answers 404 to the list (403 where the RBAC lacks them): the
cache then counts as synced and empty (a server started before the CRDs, or upgraded before its RBAC,
must not stay unready; /readyz says `served: false`), and lists again every `absent_retry` seconds,
so CRDs installed later are picked up without a restart.

`spec_version()` identifies what the loader reads of the objects (uid, generation, labels and
annotations): status writes, which the watch also delivers, do not change it, so the server's own
status updates never trigger a reload.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from webhook.install.crds import GROUP, OVERLAY, POLICY, PolicyResource

from .connect import ClusterError
from .watchcache import WatchCache

log = logging.getLogger(__name__)
SpecVersion = tuple[tuple[str, str, str, int, str], ...]


class PolicyObjectCache(WatchCache):
    """Every object of one policy kind (all namespaces for GPUPolicyException)."""

    def __init__(self, api_client: ApiClient, resource: PolicyResource, absent_retry: float = 10.0, **options: Any):
        super().__init__(api_client, resource.collection, **options)
        self.definition = resource
        self.kind = resource.kind.lower()
        self.absent = False  # the cluster does not serve the kind (CRD not installed)
        self._absent_retry = absent_retry

    def _list(self, collection: str | None = None, limit: int | None = None) -> None:
        try:
            super()._list(collection, limit)
        except ApiException as error:
            if error.status not in (403, 404):
                raise
            if not self.absent:
                if error.status == 404:
                    log.info(
                        "%s: not served by this cluster (CRD not installed); none loaded", self.definition.crd_name
                    )
                else:  # an upgrade that forgot the RBAC must not make every replica unready
                    log.warning(
                        "%s: listing is forbidden (RBAC: the ServiceAccount may list and watch them); none loaded",
                        self.definition.crd_name,
                    )
            self.absent = True
            self._items = {}
            self._resource_version = None
            self._synced.set()
            self._notify("SYNCED", "")
            return
        if self.absent:
            log.info("%s: now served; watching", self.definition.crd_name)
        self.absent = False

    def _watch(self) -> None:
        if self.absent:  # nothing to watch: list again after a while
            self._stopping.wait(self._absent_retry)
            return
        super()._watch()

    def objects(self) -> list[dict[str, Any]]:
        """Every object, sorted by (namespace, name): the order the loader sees them in."""
        return [self._items[ns][name] for ns in sorted(self._items) for name in sorted(self._items[ns])]

    def status(self) -> dict[str, Any]:
        return {**super().status(), "served": not self.absent}


def spec_version(objects: list[dict[str, Any]]) -> SpecVersion:
    """What the loader reads of these objects, as a comparable value (status left out)."""
    out = []
    for obj in objects:
        metadata = obj.get("metadata") or {}
        labels = repr(sorted((metadata.get("labels") or {}).items()))
        annotations = repr(sorted((metadata.get("annotations") or {}).items()))
        out.append(
            (
                str(metadata.get("namespace") or ""),
                str(metadata.get("name")),
                str(metadata.get("uid")),
                int(metadata.get("generation") or 0),
                labels + annotations,
            )
        )
    return tuple(out)


# (API group, plural) of the rules the cluster holds: `list` (and `watch` in the server) is the RBAC they need
RULE_RESOURCES: tuple[tuple[str, str], ...] = tuple((GROUP, r.plural) for r in (POLICY, OVERLAY))


class PolicyCaches:
    """The rules the cluster holds: GPUPolicy and GPUPolicyOverlay objects (the server's `--policies`).

    A one-shot door (`audit --cluster`) lists them once (`load`) instead of watching them, so that it
    judges the cluster's workloads with the cluster's rules, as the server does."""

    def __init__(self, api_client: ApiClient, **options: Any) -> None:
        self.policies = PolicyObjectCache(api_client, POLICY, **options)
        self.overlays = PolicyObjectCache(api_client, OVERLAY, **options)

    @property
    def caches(self) -> list[PolicyObjectCache]:
        return [self.policies, self.overlays]

    @property
    def synced(self) -> bool:
        return all(cache.synced for cache in self.caches)

    def objects(self) -> list[dict[str, Any]]:
        """GPUPolicy then GPUPolicyOverlay objects, each sorted by name."""
        return [obj for cache in self.caches for obj in cache.objects()]

    def start(self) -> None:
        for cache in self.caches:
            cache.start()

    def load(self) -> PolicyCaches:
        """List both once, without watching (404 or 403: none); ClusterError on any other failure."""
        for cache in self.caches:
            try:
                cache.list_once()
            except ApiException as error:
                raise ClusterError(f"listing {cache.definition.crd_name}: HTTP {error.status} {error.reason}") from None
            except Exception as error:  # urllib3: refused, timed out
                raise ClusterError(f"listing {cache.definition.crd_name}: {type(error).__name__}: {error}") from None
        return self

    def wait_synced(self, timeout: float) -> bool:
        return all(cache.wait_synced(timeout) for cache in self.caches)

    def stop(self, timeout: float = 5.0) -> None:
        for cache in self.caches:
            cache.stop(timeout)

    def detail(self) -> dict[str, Any]:
        return {cache.kind: cache.status() for cache in self.caches}
