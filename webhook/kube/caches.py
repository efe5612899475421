"""The cluster context the server hands the engine, each from its own watch cache (watchcache.py).

- Namespaces: `namespaceObject` (labels, annotations); a miss is looked up (one GET) before deciding.
- PriorityClasses (scheduling.k8s.io/v1): `priorityClasses` / `defaultPriorityClass`.
- ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1, GA in 1.34): what a pod's
  spec.resourceClaims refer to, so the engine knows whether they are GPUs.
- Kueue's LocalQueues, ClusterQueues and ResourceFlavors (kueue.x-k8s.io/v1beta1): `kueueQueues`, where
  the namespace's queues admit workloads (a cluster without Kueue has no queues).
- GPUPolicyExceptions (gpu-webhook.io/v1alpha1, webhook/install/crds.py): the namespace's exceptions,
  each parsed once when it changes, on the watch thread, at most `per_namespace` applied per namespace;
  an expired one stops applying by itself (the engine compares the expiry with the request's time).

`ClusterCaches` is what the server holds: it answers the namespace questions itself and gives
the rest as the engine's ClusterContext with dict reads only (`context`). A one-shot door
(`audit --cluster`) holds the same ClusterCaches, listed once (`load`) instead of watched, and
reads the same `context`: the server and the audit cannot see different clusters.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import orjson
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from webhook.engine import (
    ClusterContext,
    PolicyException,
    RuleLoadError,
    parse_exception,
    priority_class_table,
    queue_table,
)
from webhook.engine.documents import API_VERSION, EXCEPTION_KIND, MAX_EXCEPTIONS_PER_NAMESPACE, POLICY_RESOURCES

from . import rest
from .connect import ClusterError
from .policies import PolicyObjectCache
from .watchcache import WatchCache

log = logging.getLogger(__name__)
EXCEPTION = POLICY_RESOURCES[EXCEPTION_KIND]


class NamespaceCache(WatchCache):
    """Namespaces by name; `lookup` GETs one that the watch has not (yet) delivered."""

    kind = "namespace"
    resource = ("", "namespaces")

    def __init__(self, api_client: ApiClient, **options: Any) -> None:
        super().__init__(api_client, "/api/v1/namespaces", item="/api/v1/namespaces/{name}", **options)

    def context(self, namespace: str | None) -> ClusterContext:
        """Namespaces only: nothing known beyond the namespace."""
        return ClusterContext()

    async def resolve_claims(self, namespace: str, pod: Any) -> None:
        """Namespaces only: no claims to look up."""

    def synced_for(self, references: frozenset[str]) -> bool:
        """Namespaces only: the rules see no PriorityClasses (unknown), as a cluster without any."""
        return self.synced

    def detail(self) -> dict[str, Any]:
        """cache name -> status, as ClusterCaches.detail gives it (the server's NamespaceSource)."""
        return {self.kind: self.status()}


class PriorityClassCache(WatchCache):
    """PriorityClasses, with the engine's table of them rebuilt only when one changed."""

    kind = "priorityclass"
    resource = ("scheduling.k8s.io", "priorityclasses")

    def __init__(self, api_client: ApiClient, **options: Any) -> None:
        super().__init__(api_client, "/apis/scheduling.k8s.io/v1/priorityclasses", **options)
        self._table: dict[str, dict[str, Any]] | None = None
        self._table_of: int = -1

    def table(self) -> dict[str, dict[str, Any]] | None:
        """name -> {value, preemptionPolicy, globalDefault}; None until the first list."""
        if not self.synced:
            return None
        classes = self.in_namespace("")
        version = id(classes), len(classes), self._resource_version
        if self._table is None or version != self._table_of:
            self._table = priority_class_table(classes.values())
            self._table_of = version  # type: ignore[assignment]
        return self._table


_DRA = "/apis/resource.k8s.io/v1"


def _resource_paths(plural: str) -> tuple[str, str]:
    """resource.k8s.io/v1 (GA in 1.34): the collection across namespaces, and one object."""
    return f"{_DRA}/{plural}", f"{_DRA}/namespaces/{{namespace}}/{plural}/{{name}}"


class _DraCache(WatchCache):
    """ResourceClaims or ResourceClaimTemplates of every namespace (or of one: `in_one`)."""

    resource = ("resource.k8s.io", "")

    def __init__(self, api_client: ApiClient, **options: Any) -> None:
        collection, item = _resource_paths(self.resource[1])
        super().__init__(api_client, collection, item=item, **options)

    def in_one(self, namespace: str) -> str:
        """The collection of one namespace (a one-shot door scoped to it)."""
        return f"{_DRA}/namespaces/{quote(namespace, safe='')}/{self.resource[1]}"


class ClaimTemplateCache(_DraCache):
    kind = "resourceclaimtemplate"
    resource = ("resource.k8s.io", "resourceclaimtemplates")


class ClaimCache(_DraCache):
    kind = "resourceclaim"
    resource = ("resource.k8s.io", "resourceclaims")
    keep_status = False  # one claim per DRA pod: keep the spec, not the allocation


_KUEUE = "/apis/kueue.x-k8s.io/v1beta1"  # Kueue v0.13's API; later releases serve it beside v1beta2


class KueueCache(WatchCache):
    """One Kueue kind, status left out. A cluster without Kueue (404) has none of it, and is asked
    again every `absent_retry` seconds, quietly: Kueue installed later is found without a restart."""

    resource = ("kueue.x-k8s.io", "")
    keep_status = False
    absent_retry = 10.0  # as the policy kinds' caches: three LISTs per 10 s on a cluster without Kueue

    def __init__(self, api_client: ApiClient, **options: Any) -> None:
        super().__init__(api_client, f"{_KUEUE}/{self.resource[1]}", **options)
        self.absent = False
        self.problem = ""  # why the kind is not read although Kueue is installed ("" while it is read)

    def _list(self, collection: str | None = None, limit: int | None = None) -> None:
        try:
            super()._list(collection, limit)
        except ApiException as error:
            if error.status != 404:
                raise
            other = self._other_versions()
            problem = (
                f"HTTP 404: {_KUEUE} is not served, but kueue.x-k8s.io is ({', '.join(other)}): rules that "
                "read kueueQueues see no queues"
                if other  # Kueue is there, in versions this server does not read: said, never a quiet "no queues"
                else ""
            )
            if problem and problem != self.problem:
                log.error("%s: %s", self.resource[1], problem)
            elif not problem and not self.absent:
                log.info("%s: not served by this cluster (Kueue is not installed): no queues", self.resource[1])
            self.absent, self.problem = True, problem
            self._items = {}
            self._resource_version = None  # nothing to watch: list again after `absent_retry`
            self._last_seen = time.monotonic()
            self._synced.set()
            self._notify("SYNCED", "")
            return
        self.absent, self.problem = False, ""

    def _other_versions(self) -> list[str]:
        """The versions of kueue.x-k8s.io the cluster serves (none: Kueue is not installed)."""
        try:
            group = orjson.loads(rest.get(self._api, "/apis/kueue.x-k8s.io", timeout=(5, 10)).data)
        except Exception:  # 404 (no Kueue), or no answer: nothing more to say than the 404 itself
            return []
        return [str(v.get("version")) for v in group.get("versions") or () if isinstance(v, Mapping)]

    def _watch(self) -> None:
        if self._resource_version is None:  # not served: look again later
            self._stopping.wait(self.absent_retry)
            return
        super()._watch()

    def status(self) -> dict[str, Any]:
        return {**super().status(), "served": not self.absent, "problem": self.problem or None}


class LocalQueueCache(KueueCache):
    kind = "localqueue"
    resource = ("kueue.x-k8s.io", "localqueues")


class ClusterQueueCache(KueueCache):
    kind = "clusterqueue"
    resource = ("kueue.x-k8s.io", "clusterqueues")


class ResourceFlavorCache(KueueCache):
    kind = "resourceflavor"
    resource = ("kueue.x-k8s.io", "resourceflavors")


class KueueQueues:
    """The three Kueue caches, and per namespace the `kueueQueues` table they make, rebuilt only after
    one of them changed (the request path then reads a dict)."""

    def __init__(self, api_client: ApiClient, **options: Any) -> None:
        self.local = LocalQueueCache(api_client, **options)
        self.cluster = ClusterQueueCache(api_client, **options)
        self.flavors = ResourceFlavorCache(api_client, **options)
        self._version: tuple[Any, ...] = ()
        self._tables: dict[str, dict[str, dict[str, Any]]] = {}

    @property
    def caches(self) -> tuple[KueueCache, ...]:
        return (self.local, self.cluster, self.flavors)

    @property
    def synced(self) -> bool:
        return all(cache.synced for cache in self.caches)

    def table(self, namespace: str) -> dict[str, dict[str, Any]] | None:
        """LocalQueue name -> {clusterQueue, flavors} for `namespace`; None until all three are listed."""
        if not self.synced:
            return None
        # a list replaces the map, every event (and bookmark) moves the resourceVersion: O(1), not O(queues)
        version = tuple((id(c._items), c._resource_version) for c in self.caches)
        if version != self._version:
            self._version, self._tables = version, {}
        found = self._tables.get(namespace)
        if found is None:
            local = self.local.in_namespace(namespace).values()
            found = queue_table(local, self.cluster.in_namespace(""), self.flavors.in_namespace(""))
            self._tables[namespace] = found
        return found


NotApplied = Callable[[dict[str, int]], None]


class ExceptionCache(PolicyObjectCache):
    """GPUPolicyExceptions of every namespace, each parsed once when it changes (a CRD not installed: none).

    The watch thread parses the object an event carries (jsonschema and all) and rebuilds the tuple of
    that namespace alone, which it swaps in whole: the request path (`of`) is one dict read, and a
    change costs the changed object, not every exception of the cluster. The first list parses everything
    once, on the same thread; a list again (410 Gone, a broken watch) parses only the objects whose
    resourceVersion it has not parsed. Not applied, and counted (`not_applied`, `on_not_applied`): an exception
    that does not parse (it reached the cluster while the /policies check was down; logged once per
    resourceVersion), and, past `per_namespace` valid ones in a namespace, the newest by
    (creationTimestamp, name). Failing closed: an extra exception lifts no rule, and which ones apply
    is the same on every replica.
    """

    resource = (EXCEPTION.group, EXCEPTION.plural)

    def __init__(
        self,
        api_client: ApiClient,
        per_namespace: int = MAX_EXCEPTIONS_PER_NAMESPACE,
        on_not_applied: NotApplied | None = None,
        **options: Any,
    ) -> None:
        # without the CRD, no exceptions; a replica that uses the policy kinds requires it instead
        # (webhook.kube.PolicyCaches sets absent_ok from `serve --policies`)
        super().__init__(api_client, EXCEPTION, absent_ok=True, **options)
        self.per_namespace = per_namespace
        self.on_not_applied = on_not_applied  # {"invalid": n, "over_limit": n} after each change
        # namespace -> name -> (resourceVersion, the parsed exception or None: invalid)
        self._parsed: dict[str, dict[str, tuple[str, PolicyException | None]]] = {}
        self._applied: dict[str, tuple[PolicyException, ...]] = {}  # what `of` answers, per namespace
        self._over: dict[str, tuple[str, ...]] = {}  # namespace -> names past the bound
        self._invalid: dict[str, int] = {}
        self._rejected: set[tuple[str, str, str]] = set()  # (namespace, name, resourceVersion) logged

    def in_one(self, namespace: str) -> str:
        """The collection of one namespace (a one-shot door scoped to it)."""
        return f"/apis/{API_VERSION}/namespaces/{quote(namespace, safe='')}/{EXCEPTION.plural}"

    def of(self, namespace: str) -> tuple[PolicyException, ...]:
        """The exceptions applied in one namespace: valid, and within the bound."""
        return self._applied.get(namespace, ())

    def count(self, namespace: str) -> int:
        """The namespace's GPUPolicyExceptions as stored (valid or not): what the /policies check bounds."""
        return len(self._items.get(namespace) or ())

    def not_applied(self) -> dict[str, int]:
        """Exceptions the server does not apply, by why: `invalid` and `over_limit`."""
        return {"invalid": sum(self._invalid.values()), "over_limit": sum(len(n) for n in self._over.values())}

    def over_limit(self, namespace: str) -> tuple[str, ...]:
        """The names of the namespace's exceptions not applied for being past the bound."""
        return self._over.get(namespace, ())

    # -- the watch thread ------------------------------------------------------------------------------
    def _list(self, collection: str | None = None, limit: int | None = None) -> None:
        super()._list(collection, limit)
        items = self._items
        # what was parsed stays: an object the list returns at the resourceVersion already parsed is the
        # same object (a re-list after 410 Gone or a broken watch parses only what changed meanwhile)
        for namespace in list(self._applied):
            if namespace not in items:
                self._settle(namespace)
        for namespace in list(items):
            self._settle(namespace)
        self._report()

    def _apply(self, event: Mapping[str, Any]) -> None:
        super()._apply(event)
        metadata = (event.get("object") or {}).get("metadata") or {}
        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            self._settle(metadata.get("namespace") or "")
            self._report()

    def _settle(self, namespace: str) -> None:
        """Parse what changed in one namespace and swap its tuple of applied exceptions whole."""
        objects = self._items.get(namespace) or {}
        before = self._parsed.get(namespace) or {}
        parsed: dict[str, tuple[str, PolicyException | None]] = {}
        for name, obj in list(objects.items()):
            version = str((obj.get("metadata") or {}).get("resourceVersion"))
            known = before.get(name)
            parsed[name] = known if known is not None and known[0] == version else (version, self._parse(obj))
        order = sorted(parsed, key=lambda name: (_created(objects.get(name)), name))
        valid = [name for name in order if parsed[name][1] is not None]
        kept, over = valid[: self.per_namespace], tuple(valid[self.per_namespace :])
        if over and over != self._over.get(namespace):
            log.warning(
                "GPUPolicyExceptions of namespace %s past the limit of %d not applied: %s",
                namespace,
                self.per_namespace,
                ", ".join(over),
            )
        self._parsed[namespace] = parsed
        self._applied[namespace] = tuple(parsed[name][1] for name in kept)  # type: ignore[misc]
        self._over[namespace] = over
        self._invalid[namespace] = len(parsed) - len(valid)
        if not parsed:
            for table in (self._parsed, self._applied, self._over, self._invalid):
                table.pop(namespace, None)

    def _parse(self, obj: dict[str, Any]) -> PolicyException | None:
        metadata = obj.get("metadata") or {}
        namespace, name = metadata.get("namespace") or "", metadata.get("name") or ""
        try:
            return parse_exception(obj, f"{EXCEPTION.kind}/{namespace}/{name}")
        except RuleLoadError as error:
            seen = (namespace, name, str(metadata.get("resourceVersion")))
            if seen not in self._rejected:
                if len(self._rejected) > _MAX_REJECTED_LOGGED:
                    self._rejected.clear()
                self._rejected.add(seen)
                log.warning("GPUPolicyException %s/%s ignored: %s", namespace, name, error)
            return None

    def _report(self) -> None:
        if self.on_not_applied is not None:
            self.on_not_applied(self.not_applied())


_MAX_REJECTED_LOGGED = 10_000


def _created(obj: Mapping[str, Any] | None) -> str:
    """creationTimestamp as the API writes it (RFC 3339 in UTC, second precision: it sorts as text)."""
    metadata = (obj or {}).get("metadata") or {}
    return str(metadata.get("creationTimestamp") or "")


# (API group, plural) of what ClusterCaches reads: `list` (and `watch` in the server) on each is the
# RBAC it needs; `get` too on namespaces (a miss, or an audit scoped to one namespace)
CONTEXT_RESOURCES: tuple[tuple[str, str], ...] = tuple(
    cache.resource
    for cache in (
        NamespaceCache,
        PriorityClassCache,
        ClaimCache,
        ClaimTemplateCache,
        ExceptionCache,
        LocalQueueCache,
        ClusterQueueCache,
        ResourceFlavorCache,
    )
)


# the CEL variables built from the PriorityClass cache and the Kueue caches (webhook/engine/programs.py)
PRIORITY_CLASS_VARIABLES = frozenset({"priorityClasses", "defaultPriorityClass"})
KUEUE_VARIABLES = frozenset({"kueueQueues"})


class ClusterCaches:
    """Every watch cache the server reads; duck-types the server's NamespaceSource.

    PriorityClasses and DRA objects are optional extras: a cluster without resource.k8s.io/v1
    (before 1.34) or without RBAC for them keeps working on namespaces alone; the engine then
    sees None (unknown) for what is missing.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        dra: bool = True,
        exceptions: bool = True,
        kueue: bool = True,
        exceptions_per_namespace: int = MAX_EXCEPTIONS_PER_NAMESPACE,
        **options: Any,
    ) -> None:
        self.namespaces = NamespaceCache(api_client, **options)
        self.priority_classes = PriorityClassCache(api_client, **options)
        self.claims = ClaimCache(api_client, **options) if dra else None
        self.templates = ClaimTemplateCache(api_client, **options) if dra else None
        self.exceptions = ExceptionCache(api_client, exceptions_per_namespace, **options) if exceptions else None
        self.kueue = KueueQueues(api_client, **options) if kueue else None

    @property
    def caches(self) -> list[WatchCache]:
        found = (self.namespaces, self.priority_classes, self.claims, self.templates, self.exceptions)
        return [c for c in found if c is not None] + list(self.kueue.caches if self.kueue is not None else ())

    # -- NamespaceSource ---------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        """The namespaces have been listed: every tenant rule has its namespaceObject."""
        return self.namespaces.synced

    def synced_for(self, references: frozenset[str]) -> bool:
        """Ready needs the namespaces, and the PriorityClasses where a rule reads them: until their first
        list `priorityClasses` and `defaultPriorityClass` are unknown, and a rule that sets a class from
        them sets none. The PriorityClass API is always served (scheduling.k8s.io/v1) and the shipped
        RBAC grants its list and watch, so a replica that cannot list them is misconfigured: it stays
        unready, and /readyz names the cache's error. So it is with Kueue's queues where a rule reads
        `kueueQueues`: a cluster without Kueue is listed at once (no queues); a 403 is the RBAC's. DRA
        objects and exceptions only add context."""
        if references & PRIORITY_CLASS_VARIABLES and not self.priority_classes.synced:
            return False
        if references & KUEUE_VARIABLES and self.kueue is not None and not self.kueue.synced:
            return False
        return self.namespaces.synced

    @property
    def stale(self) -> bool:
        return any(cache.stale for cache in self.caches)

    def get(self, name: str) -> dict[str, Any] | None:
        return self.namespaces.get(name)

    async def lookup(self, name: str) -> dict[str, Any] | None:
        return await self.namespaces.lookup(name)

    def start(self) -> None:
        for cache in self.caches:
            cache.start()

    def stop(self, timeout: float = 5.0) -> None:
        for cache in self.caches:
            cache.stop(timeout)

    def detail(self) -> dict[str, Any]:
        return {cache.kind: cache.status() for cache in self.caches}

    # -- a one-shot door: `audit --cluster` -------------------------------------------------------
    def load(
        self, namespace: str | None = None, limit: int | None = None, note: Callable[[str, int], None] | None = None
    ) -> ClusterCaches:
        """List every cache once instead of watching it: the context of a door that decides a snapshot.

        The maps are the ones the watches' first lists make (same paths, same trimming), so `get` and
        `context` give the engine what the server's watches give it. With `namespace`, only that
        Namespace (one GET) and that namespace's DRA objects are read; PriorityClasses are
        cluster-wide. Namespaces are required (ClusterError). The other caches are optional as in the
        server: one the cluster does not serve (404: no resource.k8s.io/v1 before 1.34) or the
        caller may not list (403) stays unknown to the rules, and `note(message, status)` says so.
        """
        if namespace:
            if _attempt(self.namespaces, self.namespaces.read_once, namespace) is None:
                raise ClusterError(f"namespace {namespace} not found")
        else:
            _attempt(self.namespaces, self.namespaces.list_once, None, limit)
        kueue = self.kueue.caches if self.kueue is not None else ()
        for cache in (self.priority_classes, self.claims, self.templates, self.exceptions, *kueue):
            if cache is None:
                continue
            scoped = cache.in_one(namespace) if namespace and isinstance(cache, _DraCache | ExceptionCache) else None
            try:
                _attempt(cache, cache.list_once, scoped, limit, optional=True)
            except _Unavailable as error:
                if note is not None:
                    note(f"{_plural(cache)}: {error}; rules that read them see them as unknown", error.status)
        return self

    # -- the engine's input ------------------------------------------------------------------------
    def context(self, namespace: str | None) -> ClusterContext:
        """PriorityClasses and the namespace's DRA objects and exceptions: dict reads, no I/O.
        None where unknown: a cache the cluster does not serve, or not listed yet."""
        namespace = namespace or ""
        claims, templates = self.claims, self.templates
        return ClusterContext(
            priority_classes=self.priority_classes.table(),
            resource_claims=claims.in_namespace(namespace) if claims is not None and claims.synced else None,
            resource_claim_templates=(
                templates.in_namespace(namespace) if templates is not None and templates.synced else None
            ),
            kueue_queues=self.kueue.table(namespace) if self.kueue is not None and namespace else None,
            exceptions=self.exceptions.of(namespace) if self.exceptions is not None and namespace else (),
        )

    async def resolve_claims(self, namespace: str, pod: Any) -> None:
        """Before evaluating a Pod: GET the claims and templates its spec names that the watch lacks,
        so that `context` then has them.

        The pack denies tenant pods whose claims cannot be resolved (dra-pod-claims-resolvable);
        a template created a moment before the pod must not be refused for the watch's latency.
        """
        if self.claims is None or self.templates is None or not isinstance(pod, dict):
            return
        spec = pod.get("spec")
        entries = spec.get("resourceClaims") if isinstance(spec, dict) else None
        if not isinstance(entries, list) or not namespace:
            return
        for entry in entries[:32]:  # bounded: a pod names a handful
            if not isinstance(entry, dict):
                continue
            if isinstance(entry.get("resourceClaimTemplateName"), str):
                await self.templates.lookup(entry["resourceClaimTemplateName"], namespace)
            elif isinstance(entry.get("resourceClaimName"), str):
                await self.claims.lookup(entry["resourceClaimName"], namespace)


class _Unavailable(Exception):
    """An optional resource the cluster does not serve (404) or the caller may not list (403)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _plural(cache: WatchCache) -> str:
    group, plural = getattr(cache, "resource", ("", cache.kind))
    return f"{plural}.{group}" if group else plural


def _attempt(cache: WatchCache, call: Callable[..., Any], *args: Any, optional: bool = False) -> Any:
    """`call(*args)`, its failures as ClusterError (or _Unavailable for an optional cache's 403 and 404)."""
    try:
        return call(*args)
    except ApiException as error:
        reason = f"HTTP {error.status} {error.reason}"
        if optional and error.status in (403, 404):
            raise _Unavailable("not served by this cluster" if error.status == 404 else reason, error.status) from None
        raise ClusterError(f"listing {_plural(cache)}: {reason}") from None
    except ClusterError:
        raise
    except Exception as error:  # urllib3: connection refused, timeouts; name the server's answer, not the stack
        raise ClusterError(f"listing {_plural(cache)}: {type(error).__name__}: {error}") from None
