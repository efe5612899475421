"""Watch caches of the policy objects (GPUPolicy, GPUPolicyOverlay; GPUPolicyException: caches.py), on watchcache.py.

A replica configured to use the policy kinds (`serve --policies cluster|both`, what the shipped
Deployment runs) fails closed on what it cannot read, as Gatekeeper's readiness tracker keeps a
replica unready until what it must enforce is loaded:

- never listed (403 forbidden, 404 not served: the CRDs are not installed, or no answer): the cache is
  not synced, `problem` says why, and the server is not ready (/readyz names the kind, and
  `gpu_webhook_policy_source_ready{kind}` is 0); it lists again every `absent_retry` seconds, so RBAC
  or CRDs fixed later are picked up without a restart;
- listed before, refused now (RBAC revoked: the watch is answered 403) or not answering (the watch
  broke): the cache lists again, after the watch loop's backoff, to find out; the objects listed
  before stay in use, the replica stays ready and serving, and the problem is reported (/readyz
  `degraded`, the metric, one log line per change) until a list succeeds.

`absent_ok` (`serve --policies auto`, the default outside the shipped Deployment) treats a 404 as "no
objects": a server pointed at a cluster without the CRDs keeps serving its files, and picks the
objects up once the CRDs are installed; a 403 or no answer still fails closed. `--policies files` does
not read GPUPolicies and overlays at all. A one-shot door (`audit --cluster`, `list_once`) reads a 403
or 404 as "none".

`spec_version()` identifies what the loader reads of the objects (uid, generation, labels and
annotations): status writes, which the watch also delivers, do not change it, so the server's own
status updates never trigger a reload.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from webhook.engine.documents import OVERLAY_KIND, POLICY_KIND, POLICY_RESOURCES, PolicyResource

from .connect import ClusterError
from .watchcache import WatchCache, _Gone

log = logging.getLogger(__name__)
SpecVersion = tuple[tuple[str, str, str, int, str], ...]


class PolicyObjectCache(WatchCache):
    """Every object of one policy kind (all namespaces for GPUPolicyException)."""

    def __init__(
        self,
        api_client: ApiClient,
        resource: PolicyResource,
        absent_retry: float = 10.0,
        absent_ok: bool = False,
        **options: Any,
    ):
        super().__init__(api_client, resource.collection, **options)
        self.definition = resource
        self.kind = resource.kind.lower()
        self.absent = False  # the last list was a 404: the cluster does not serve the kind (CRD not installed)
        self.absent_ok = absent_ok  # a 404 counts as "no objects" (`serve --policies auto`)
        self.problem = ""  # why the kind cannot be read now ("" while it can)
        self._answered = threading.Event()  # a list has had an answer: objects, 403 or 404
        self._one_shot = False
        self._absent_retry = absent_retry
        self.listeners: list[Callable[[], None]] = []  # told of every list and event, on the watch thread

    def _notify(self, kind: str, name: str) -> None:
        super()._notify(kind, name)
        for listener in self.listeners:
            listener()

    def _list(self, collection: str | None = None, limit: int | None = None) -> None:
        try:
            super()._list(collection, limit)
        except ApiException as error:
            if error.status not in (403, 404):
                self._lost(f"listing answered HTTP {error.status} {error.reason}")
                raise
            self._resource_version = None  # nothing to watch from: list again after `absent_retry`
            self.absent = error.status == 404
            if self._one_shot or (self.absent and self.absent_ok):
                self._none_served(error.status)
            else:
                self._lost(self._refusal(error.status))
            self._answered.set()  # after `synced`: a caller that waited for the answer sees both
            return
        except Exception as error:  # network: refused, timed out; the watch loop retries with backoff
            self._lost(f"no answer to the list: {type(error).__name__}: {error}")
            raise
        if self.problem or self.absent:
            log.info("%s: listed (%d objects); watching", self.definition.crd_name, len(self))
        self.absent = False
        self.problem = ""
        self._answered.set()

    def _none_served(self, status: int) -> None:
        """A one-shot door, or `--policies auto` without the CRDs: the kind has no objects."""
        if not self.synced or len(self):
            why = "not served by this cluster (CRD not installed)" if status == 404 else "listing is forbidden"
            log.info("%s: %s; none loaded", self.definition.crd_name, why)
        self._items = {}
        self.problem = ""
        self._synced.set()
        self._notify("SYNCED", "")

    def _refusal(self, status: int) -> str:
        what = self.definition.crd_name
        if status == 404:
            return (
                f"{what} is not served by this cluster (HTTP 404: the CRD is not installed): install the CRDs "
                "(gpu-webhook manifests renders them) or run serve with --policies files"
            )
        return (
            f"listing {what} is forbidden (HTTP 403): the server's ServiceAccount needs list and watch on "
            "them (manifests/base/rbac.yaml), or run serve with --policies files"
        )

    def _lost(self, problem: str) -> None:
        """Record why the kind cannot be read; said once per change. Objects listed before stay."""
        if problem == self.problem:
            return
        self.problem = problem
        if self.synced:
            log.error("%s: %s; the %d objects listed before stay in use", self.definition.crd_name, problem, len(self))
        else:
            log.error("%s: %s; not ready until it can be listed", self.definition.crd_name, problem)

    def _watch(self) -> None:
        if self._resource_version is None:  # the list was refused: list again after a while
            self._stopping.wait(self._absent_retry)
            return
        try:
            super()._watch()
        except _Gone:
            raise
        except ApiException as error:
            if error.status in (403, 404):  # access lost while serving: list again to find out what is there
                self._lost(self._refusal(error.status))
                self._resource_version = None
            raise
        except Exception as error:  # no answer: said, and the next list (after the backoff) clears it
            if not self._stopping.is_set():  # stop() closes the stream under the watch
                self._lost(f"the watch broke: {type(error).__name__}: {error}")
                self._resource_version = None
            raise

    def list_once(self, collection: str | None = None, limit: int | None = None) -> None:
        """A one-shot door (`audit --cluster`): a kind not served (404) or forbidden (403) has no objects."""
        self._one_shot = True
        super().list_once(collection, limit)

    def wait_answered(self, timeout: float | None = None) -> bool:
        """Until a list has had an answer (objects, 403 or 404), or `timeout`: whether one has."""
        return self._answered.wait(timeout)

    def objects(self) -> list[dict[str, Any]]:
        """Every object, sorted by (namespace, name): the last ones listed when the kind cannot be read now."""
        return [self._items[ns][name] for ns in sorted(self._items) for name in sorted(self._items[ns])]

    def status(self) -> dict[str, Any]:
        return {**super().status(), "served": not self.absent, "problem": self.problem}


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
POLICY, OVERLAY = POLICY_RESOURCES[POLICY_KIND], POLICY_RESOURCES[OVERLAY_KIND]
RULE_RESOURCES: tuple[tuple[str, str], ...] = tuple((r.group, r.plural) for r in (POLICY, OVERLAY))


class PolicyCaches:
    """The rules the cluster holds: GPUPolicy and GPUPolicyOverlay objects (the server's `--policies`).

    `exceptions` (the GPUPolicyException cache of webhook.kube.ClusterCaches, started with those) is an
    input the replica must read as well: `unavailable`, `degraded` and `detail` cover it.

    A one-shot door (`audit --cluster`) lists them once (`load`) instead of watching them, so that it
    judges the cluster's workloads with the cluster's rules, as the server does."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        absent_ok: bool = False,
        exceptions: PolicyObjectCache | None = None,
        **options: Any,
    ) -> None:
        self.policies = PolicyObjectCache(api_client, POLICY, absent_ok=absent_ok, **options)
        self.overlays = PolicyObjectCache(api_client, OVERLAY, absent_ok=absent_ok, **options)
        self.exceptions = exceptions
        if exceptions is not None:
            exceptions.absent_ok = absent_ok

    @property
    def caches(self) -> list[PolicyObjectCache]:
        """The caches whose objects are rules (loaded with the files)."""
        return [self.policies, self.overlays]

    @property
    def inputs(self) -> list[PolicyObjectCache]:
        """Every policy kind the replica reads: the rules' caches and the exceptions'."""
        return [*self.caches, *([self.exceptions] if self.exceptions is not None else [])]

    @property
    def synced(self) -> bool:
        return all(cache.synced for cache in self.caches)

    def kinds(self) -> list[str]:
        return [cache.definition.kind for cache in self.inputs]

    def unavailable(self) -> dict[str, str]:
        """Kind -> why, for each input never listed: the replica must not be ready without it."""
        return {cache.definition.kind: cache.problem or "not listed yet" for cache in self.inputs if not cache.synced}

    def degraded(self) -> dict[str, str]:
        """Kind -> why, for each input listed before that cannot be read now: its last objects stay in use."""
        return {cache.definition.kind: cache.problem for cache in self.inputs if cache.synced and cache.problem}

    def objects(self) -> list[dict[str, Any]]:
        """GPUPolicy then GPUPolicyOverlay objects, each sorted by name."""
        return [obj for cache in self.caches for obj in cache.objects()]

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call `callback()` (on a watch thread: it must only hand over) on every list and event of the rules'
        caches: the server's reload watcher then loads a changed object at once (webhook/server/reload.py)."""
        for cache in self.caches:
            cache.listeners.append(callback)

    def start(self) -> None:
        """The rules' caches; the exceptions' starts with the other cluster caches."""
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

    def wait_answered(self, timeout: float) -> bool:
        """Until each rules' cache has had an answer to its list (objects, 403 or 404), or `timeout`."""
        return all(cache.wait_answered(timeout) for cache in self.caches)

    def stop(self, timeout: float = 5.0) -> None:
        for cache in self.caches:
            cache.stop(timeout)

    def detail(self) -> dict[str, Any]:
        return {cache.kind: cache.status() for cache in self.inputs}
