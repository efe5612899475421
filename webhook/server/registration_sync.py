"""The server keeps its two webhook configurations sending what every live replica's rules need.

webhook/install/registration.py derives each known entry's `rules` and `matchConditions` from a rule set;
this module compares them with the live `gpu-webhook-mutating` / `gpu-webhook-validating` and, as the
one writer, writes those two fields and nothing else (not failurePolicy, namespaceSelector,
clientConfig and its caBundle, timeoutSeconds, nor entries it does not know). A configuration that
does not exist is reported, never created: what to install, and where, is the installer's choice.

Several replicas run, and they hold different rule sets for a while: during a rolling upgrade (old
pack and new side by side, in either direction) and while kubelet updates a ConfigMap's mounts
seconds to a minute apart. If each wrote what its own rules derive, the last writer would win and a
narrower pack would take away what a live replica enforces (a resource no longer sent skips the
webhook whatever its failurePolicy). So (webhook/server/registration_leases.py):

- every managing replica publishes what its rules derive, per entry, in its own Lease, renewed;
- one replica, elected with a Lease as client-go's leader election does, writes; the others never do;
- the writer gives each entry the union over live replicas (`union`: every rule any of them needs,
  only the matchConditions all of them derive), and, while a replica of unknown needs is alive (one
  that publishes nothing), also keeps whatever the live entry sends. It narrows only when no live
  replica needs what it removes: a replica that stops withdraws its record, a crashed one's expires.

A new replica is not Ready (see `ready`) until the live configurations send what its rules need, so
the Service never sends it requests for objects the apiserver would not send to any webhook.

With management off (`serve --manage-registration=false`: GitOps owns the configurations) no Lease
is touched and the same checks only report: the /readyz detail, the gauge
`gpu_webhook_registration_drift` per configuration and webhook, and a warning naming what is
missing. Drift never makes a serving replica unready: a webhook that is not ready refuses or skips
every request, which is worse than one that misses some.

The webhook configurations cannot be listed or watched by name (RBAC's resourceNames does not limit
list or watch), so they are polled with GET by name; writes are GET + PUT with the resourceVersion
read, retried on 409 Conflict. All of it runs on a daemon thread, as the watch caches do: the event
loop only reads `status()`, a dict swapped whole after each pass.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from kubernetes.client import ApiClient

from webhook.engine import RuleSet
from webhook.install.registration import CONFIGURATION_NAMES, ENTRIES, NAMESPACE, entry_fields
from webhook.kube import rest
from webhook.kube.background import BackgroundThread
from webhook.server.metrics import Metrics
from webhook.server.registration_leases import LEASE_DURATION, LeaseError, Leases, Need

log = logging.getLogger("gpu_webhook.registration")

API = "/apis/admissionregistration.k8s.io/v1"
FIELD_MANAGER = "gpu-webhook"  # managedFields name the server as the writer of the two fields
CONFLICT_RETRIES = 5
# (group, version, resource, operation, scope): one thing the apiserver may send
Atom = tuple[str, str, str, str, str]


# -- comparing: pure functions ------------------------------------------------------------------


def atoms(rules: Iterable[Mapping[str, Any]]) -> list[Atom]:
    """Every (group, version, resource, operation, scope) named by these RuleWithOperations, in order."""
    out: list[Atom] = []
    for rule in rules:
        scope = rule.get("scope") or "*"
        for group in rule.get("apiGroups") or ():
            for version in rule.get("apiVersions") or ():
                for resource in rule.get("resources") or ():
                    for operation in rule.get("operations") or ():
                        out.append((group, version, resource, operation, scope))
    return list(dict.fromkeys(out))


def _resource_matches(pattern: str, resource: str) -> bool:
    """The apiserver's resource patterns: `*` every resource (no subresource), `*/*` everything,
    `pods/*` every subresource of pods, `*/status` that subresource of every resource."""
    if pattern == resource or pattern == "*/*":
        return True
    name, _, sub = resource.partition("/")
    wanted_name, slash, wanted_sub = pattern.partition("/")
    if not slash:
        return pattern == "*" and not sub
    return bool(sub) and wanted_name in ("*", name) and wanted_sub in ("*", sub)


def covers(rule: Mapping[str, Any], atom: Atom) -> bool:
    """Whether a live RuleWithOperations sends requests for `atom`.

    A needed scope of `*` (a kind a rule declares, namespaced or not) is covered only by scope `*`.
    """
    group, version, resource, operation, scope = atom
    live_scope = rule.get("scope") or "*"
    return (
        _within(group, rule.get("apiGroups"))
        and _within(version, rule.get("apiVersions"))
        and _within(operation, rule.get("operations"))
        and any(_resource_matches(p, resource) for p in rule.get("resources") or ())
        and live_scope in ("*", scope)
    )


def _within(value: str, allowed: Sequence[str] | None) -> bool:
    if not allowed:
        return False
    return "*" in allowed or value in allowed


def uncovered(live_rules: Sequence[Mapping[str, Any]], needed_rules: Iterable[Mapping[str, Any]]) -> list[Atom]:
    """The atoms of `needed_rules` that no live rule sends."""
    return [atom for atom in atoms(needed_rules) if not any(covers(rule, atom) for rule in live_rules)]


def describe(missing: Iterable[Atom]) -> list[str]:
    """Atoms for people: `apps/v1 deployments CREATE,UPDATE` (core group: `v1 pods ...`); scope `*` said."""
    operations: dict[tuple[str, str, str, str], list[str]] = {}
    for group, version, resource, operation, scope in missing:
        operations.setdefault((group, version, resource, scope), []).append(operation)
    out = []
    for (group, version, resource, scope), ops in operations.items():
        api = f"{group}/{version}" if group else version
        where = " (any scope)" if scope == "*" else ""
        out.append(f"{api} {resource} {','.join(ops)}{where}")
    return out


def unexpected_conditions(live: Mapping[str, Any], fields: Mapping[str, Any]) -> list[str]:
    """Names of live matchConditions that the derived ones do not have (same name and expression)."""
    wanted = [_condition(c) for c in fields.get("matchConditions") or ()]
    return [str(c.get("name")) for c in live.get("matchConditions") or () if _condition(c) not in wanted]


def _condition(condition: Mapping[str, Any]) -> tuple[Any, Any]:
    return condition.get("name"), condition.get("expression")


@dataclass(frozen=True)
class EntryDrift:
    """What a live webhook entry fails to send that the loaded rules need (empty lists: no drift)."""

    webhook: str
    found: bool
    missing: tuple[str, ...] = ()  # described atoms (see `describe`), or everything when not found
    conditions: tuple[str, ...] = ()  # live matchConditions the derived set does not have

    @property
    def drift(self) -> bool:
        return bool(self.missing or self.conditions)

    def detail(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "drift": self.drift,
            "missing": list(self.missing),
            "unexpectedMatchConditions": list(self.conditions),
        }


def entry_drift(name: str, live: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> EntryDrift:
    """Compare one live entry (None: absent from its configuration) with its derived fields."""
    if live is None:
        return EntryDrift(name, False, tuple(describe(atoms(fields["rules"]))))
    return EntryDrift(
        name,
        True,
        tuple(describe(uncovered(live.get("rules") or [], fields["rules"]))),
        tuple(unexpected_conditions(live, fields)),
    )


def in_step(live: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """Whether the live entry's rules and matchConditions are exactly the derived ones."""
    return _normal_rules(live.get("rules") or []) == _normal_rules(fields["rules"]) and list(
        live.get("matchConditions") or []
    ) == list(fields.get("matchConditions") or [])


def _normal_rules(rules: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{**rule, "scope": rule.get("scope") or "*"} for rule in rules]  # the apiserver's default scope


def union(needs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fields of one entry that send whatever any of `needs` (each an entry's `rules` and
    `matchConditions`) sends: the first one's rules, then every rule of the others that is not yet
    covered; the matchConditions that every one of them has (same name and expression), since a
    condition may only skip a request when no replica acts on it. Nothing any of them sends is left out."""
    rules: list[dict[str, Any]] = []
    for need in needs:
        for rule in need.get("rules") or ():
            if uncovered(rules, [rule]):
                rules.append(copy.deepcopy(dict(rule)))
    out: dict[str, Any] = {"rules": rules}
    sending = [need for need in needs if need.get("rules")]  # an entry without rules is never called
    if sending:
        shared = [_condition(c) for c in sending[0].get("matchConditions") or ()]
        for need in sending[1:]:
            theirs = [_condition(c) for c in need.get("matchConditions") or ()]
            shared = [c for c in shared if c in theirs]
        first = sending[0].get("matchConditions") or ()
        conditions = [copy.deepcopy(dict(c)) for c in first if _condition(c) in shared]
        if conditions:
            out["matchConditions"] = conditions
    return out


def targets(
    own: Mapping[str, Any], others: Iterable[Mapping[str, Any]], live: Mapping[str, Any], *, keep_live: bool
) -> dict[str, dict[str, Any]]:
    """What the writer gives each known entry of the live configuration: the union of its own fields
    (`own`: entry name -> fields) and every other live replica's, and, with `keep_live` (a replica of
    unknown needs is alive), of what the live entry sends now."""
    present = {w.get("name"): w for w in live.get("webhooks") or [] if isinstance(w, dict)}
    others = list(others)
    out = {}
    for name, fields in own.items():
        if name not in present:
            continue
        needs = [fields, *(o[name] for o in others if isinstance(o.get(name), Mapping))]
        # the live entry first: when it already sends all they need, it is its own union (no write)
        out[name] = union([present[name], *needs] if keep_live else needs)
    return out


@dataclass(frozen=True)
class Plan:
    """One configuration compared: each known entry's drift, and the object to PUT (None: no write)."""

    entries: tuple[EntryDrift, ...]
    desired: dict[str, Any] | None = None
    changed: tuple[str, ...] = ()  # names of the entries the write changes

    @property
    def drift(self) -> bool:
        return any(e.drift for e in self.entries)


def plan(live: Mapping[str, Any], ruleset: RuleSet, target: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
    """What the live configuration (as GET returns it) lacks for `ruleset`, and what to write.

    `target` (the writer's: entry name -> fields, see `targets`): each entry named there that is not
    exactly in step with it is given those fields; None (not the writer): nothing to write. Entries
    absent from the configuration are reported and never added.
    """
    kind = live.get("kind")
    present = {w.get("name"): w for w in live.get("webhooks") or [] if isinstance(w, dict)}
    fields = {e.name: entry_fields(ruleset, e) for e in ENTRIES if e.configuration == kind}
    entries = tuple(entry_drift(name, present.get(name), wanted) for name, wanted in fields.items())
    if target is None:
        return Plan(entries)
    changed = tuple(n for n in fields if n in present and n in target and not in_step(present[n], target[n]))
    if not changed:
        return Plan(entries)
    desired = copy.deepcopy(dict(live))
    for webhook in desired["webhooks"]:
        if webhook.get("name") in changed:
            webhook.pop("matchConditions", None)
            webhook.update(copy.deepcopy(dict(target[webhook["name"]])))
    return Plan(entries, desired, changed)


def absent(kind: str, ruleset: RuleSet) -> Plan:
    """The drift of a configuration that does not exist: everything its entries' rules need."""
    return Plan(tuple(entry_drift(e.name, None, entry_fields(ruleset, e)) for e in ENTRIES if e.configuration == kind))


# -- keeping them in step: the thread ------------------------------------------------------------


class RulesSource(Protocol):
    """What the sync reads of the server's RuleStore (webhook/server/reload.py)."""

    ruleset: RuleSet | None
    generation: int


class SyncError(Exception):
    """A read or write of a webhook configuration failed (network, RBAC, conflicts past the retries)."""


@dataclass
class _Configuration:
    """What the last pass learnt of one configuration."""

    found: bool | None = None  # None: not read yet
    plan: Plan | None = None
    error: str = ""
    checked: float | None = None  # time.monotonic() of the last successful read
    logged: dict[str, EntryDrift] = field(default_factory=dict)  # the drift last logged per entry


class RegistrationSync(BackgroundThread):
    """Checks (and, as the elected writer, writes) the live webhook configurations from a daemon thread.

    `sync_once(ruleset)` is one pass: with `manage`, publish this replica's needs, acquire or renew
    the writer's Lease, and, as the writer, give each configuration the union over live replicas;
    every replica also compares the live configurations with its own rules (drift). The thread runs
    a pass after each new rules generation, every `retry` seconds while it manages, and every
    `interval` seconds otherwise.
    """

    thread_name = "registration-sync"

    def __init__(
        self,
        api_client: ApiClient,
        rules: RulesSource,
        *,
        manage: bool,
        interval: float = 30.0,
        metrics: Metrics | None = None,
        names: Mapping[str, str] = CONFIGURATION_NAMES,
        request_timeout: tuple[float, float] = (5.0, 10.0),
        poll: float = 1.0,
        namespace: str = NAMESPACE,
        identity: str = "",
        lease_duration: float = LEASE_DURATION,
        retry: float = 2.0,
        startup_grace: float = 30.0,
    ) -> None:
        super().__init__()
        self._api = api_client
        self._rules = rules
        self.manage = manage
        self.interval = interval
        self._metrics = metrics
        self._names = dict(names)  # kind -> name
        self._timeout = request_timeout
        # the rule store is polled, not called back: a reload is a reference swap on another thread
        self._poll = poll
        self._retry = retry  # client-go's RetryPeriod: how often a managing replica runs a pass
        self._configurations = {kind: _Configuration() for kind in self._names}
        self.leases = Leases(self._lease_request, namespace, identity or "gpu-webhook", duration=lease_duration)
        self._writer: dict[str, Any] = {}  # what the last pass learnt of the writer and the replicas
        self._generation: int | None = None
        self._due = 0.0
        self._started = time.monotonic()
        self._grace = startup_grace
        self._covered = not manage  # the live registration has once sent what this replica's rules need
        self.covered_generation = 0  # the newest rules generation whose needs a pass found the registration send
        self._checked: tuple[RuleSet | None, float] = (None, 0.0)  # a follower's last drift check: rules, next due
        # (detail, name -> monotonic time of its last read): swapped whole, read by the event loop
        self._published: tuple[dict[str, Any], dict[str, float | None]] = self._snapshot()
        self.writes = 0  # PUTs of a configuration that succeeded (tests)

    # -- what the event loop reads ------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """For /readyz: managed or report-only, the writer, and per configuration and webhook whether it drifts."""
        detail, checked = self._published
        now = time.monotonic()
        configurations = {}
        for name, found in detail["configurations"].items():
            at = checked[name]
            configurations[name] = {**found, "lastCheckAgeSeconds": None if at is None else round(now - at, 1)}
        return {**detail, "configurations": configurations, "ready": self.ready}

    @property
    def drift(self) -> bool:
        return bool(self._published[0]["drift"])

    @property
    def ready(self) -> bool:
        """Whether this replica may take requests as far as the registration goes: once the live
        configurations have sent what its rules need (a new replica is not Ready while the writer has
        yet to add its kinds: an object it would deny would skip the webhook), or `startup_grace`
        seconds after start, so that a writer that is down or a configuration that is missing does not
        keep a roll-out from ever finishing. Drift later on never makes it unready."""
        return self._covered or time.monotonic() - self._started >= self._grace

    def covers(self, generation: int) -> bool:
        """Whether the live registration sends what the rules of that rules generation need (a later
        generation's pass vouches for it too: the writer's union never drops what a live replica needs)."""
        return self.covered_generation >= generation

    # -- one pass ------------------------------------------------------------------------------
    def sync_once(self, ruleset: RuleSet) -> bool:
        """One pass over the Leases and both configurations; False when a read or write failed."""
        ok = True
        target: Callable[[Mapping[str, Any]], dict[str, dict[str, Any]]] | None = None
        if self.manage:
            ok, target = self._elect(ruleset)
            # a follower whose rules the registration serves checks for drift every `interval` and when its
            # rules change; one that waits for the writer to send what its rules need checks every pass
            now = time.monotonic()
            served = self._covered and not self.drift
            if target is None and served and ruleset is self._checked[0] and now < self._checked[1]:
                self._published = self._snapshot()
                return ok
            self._checked = (ruleset, now + self.interval)
        for kind, name in self._names.items():
            state = self._configurations[kind]
            try:
                self._sync_configuration(kind, name, ruleset, state, target)
                state.error = ""
            except SyncError as error:
                ok = False
                if state.error != str(error):
                    log.warning(
                        "webhook configuration check failed", extra={"configuration": name, "error": str(error)}
                    )
                state.error = str(error)
                if self._metrics is not None:
                    self._metrics.registration_failures.labels(name).inc()
            self._report(kind, name, state)
        if all(c.found and c.plan is not None and not c.plan.drift for c in self._configurations.values()):
            self._covered = True
            # the generation first: a reload swaps the rule set in before it counts the generation up
            generation = self._rules.generation
            if ruleset is self._rules.ruleset:
                self.covered_generation = max(self.covered_generation, generation)
        self._published = self._snapshot()
        return ok

    def _elect(self, ruleset: RuleSet) -> tuple[bool, Callable[[Mapping[str, Any]], dict[str, dict[str, Any]]] | None]:
        """Publish this replica's needs and run the election; as the writer, the function that gives a
        live configuration its targets (None: not the writer, nothing to write)."""
        own = {e.name: entry_fields(ruleset, e) for e in ENTRIES}
        errors: list[str] = []
        was = self.leases.leader
        for step in (lambda: self.leases.publish(own), self.leases.elect):
            try:
                step()
            except LeaseError as error:
                errors.append(str(error))
        others: list[Need] = []
        unknown: list[str] = []
        keep_live = False
        if self.leases.leader:
            try:
                others = [n for n in self.leases.needs() if n.identity != self.leases.identity]
            except LeaseError as error:
                errors.append(str(error))
                keep_live = True  # the other replicas' needs cannot be read: nothing they send is dropped
            try:
                unknown = self.leases.unknown_replicas({self.leases.identity, *(n.identity for n in others)})
            except LeaseError as error:
                errors.append(str(error))
                unknown = ["(the Deployment's Pods cannot be listed)"]
            keep_live = keep_live or bool(unknown)
        if was != self.leases.leader:
            log.info(
                "this replica %s the writer of the webhook registration",
                "is now" if self.leases.leader else "is no longer",
                extra={"identity": self.leases.identity, "holder": self.leases.holder},
            )
        self._writer = {
            "identity": self.leases.identity,
            "leader": self.leases.leader,
            "holder": self.leases.holder,
            "leaseTransitions": self.leases.transitions,
            "liveReplicas": sorted({self.leases.identity, *(n.identity for n in others)})
            if self.leases.leader
            else None,
            "unknownReplicas": unknown if self.leases.leader else None,
            "errors": errors,
        }
        if self._metrics is not None:
            self._metrics.registration_leader.set(float(self.leases.leader))
            self._metrics.registration_unknown_replicas.set(float(len(unknown)))
        if errors:
            log.warning("registration lease pass failed", extra={"errors": errors})
        if not self.leases.leader:
            return not errors, None
        needs = [n.fields for n in others]
        return not errors, lambda live: targets(own, needs, live, keep_live=keep_live)

    def _sync_configuration(
        self,
        kind: str,
        name: str,
        ruleset: RuleSet,
        state: _Configuration,
        target: Callable[[Mapping[str, Any]], dict[str, dict[str, Any]]] | None,
    ) -> None:
        path = f"{API}/{kind.lower()}s/{name}"
        for _attempt in range(CONFLICT_RETRIES):
            status, live = self._request("GET", path)
            if status == 404:
                if state.found is not False:
                    log.warning(
                        "webhook configuration not found: the apiserver sends this server nothing through it; "
                        "it is not created here (install it with the manifests)",
                        extra={"configuration": name, "kind": kind},
                    )
                state.found, state.plan, state.checked = False, absent(kind, ruleset), time.monotonic()
                return
            if status != 200 or not isinstance(live, dict):
                raise SyncError(f"GET {path}: {_answer(status, live)}")
            state.found, state.checked = True, time.monotonic()
            # without managedFields the apiserver keeps its own record (and adds this write to it)
            metadata = {k: v for k, v in (live.get("metadata") or {}).items() if k != "managedFields"}
            live = {**live, "metadata": metadata}
            state.plan = plan(live, ruleset, None if target is None else target(live))
            if state.plan.desired is None:
                return
            status, stored = self._request("PUT", path, state.plan.desired, [("fieldManager", FIELD_MANAGER)])
            if status == 409:
                continue  # changed since our GET (an older replica, cert-manager's CA injection): read again
            if status != 200 or not isinstance(stored, dict):
                raise SyncError(f"PUT {path}: {_answer(status, stored)}")
            self.writes += 1
            if self._metrics is not None:
                self._metrics.registration_writes.labels(name, "union").inc()
            log.info(
                "webhook configuration updated to the union of the live replicas' needs",
                extra={
                    "configuration": name,
                    "webhooks": list(state.plan.changed),
                    "generation": self._rules.generation,
                    "replicas": self._writer.get("liveReplicas"),
                    "unknownReplicas": self._writer.get("unknownReplicas"),
                },
            )
            state.plan = plan(stored, ruleset)
            return
        raise SyncError(f"PUT {path}: still conflicting after {CONFLICT_RETRIES} attempts")

    def _request(
        self, method: str, path: str, body: Any = None, query: list[tuple[str, Any]] | None = None
    ) -> tuple[int, Any]:
        try:
            response = rest.send(self._api, method, path, query, body, timeout=self._timeout)
            data = response.read()
        except Exception as error:  # urllib3: refused, reset, timed out; the next pass tries again
            raise SyncError(f"{method} {path}: {type(error).__name__}: {error}") from None
        try:
            return response.status, orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            return response.status, None

    def _lease_request(self, method: str, path: str, body: Any, query: list[tuple[str, Any]] | None) -> tuple[int, Any]:
        try:
            return self._request(method, path, body, query)
        except SyncError as error:
            raise LeaseError(str(error)) from None

    def _report(self, kind: str, name: str, state: _Configuration) -> None:
        """Metrics and a log line per entry whose drift changed (each new drift is a warning)."""
        if state.plan is None:
            return
        for entry in state.plan.entries:
            if self._metrics is not None:
                self._metrics.registration_drift.labels(name, entry.webhook).set(float(entry.drift))
            before = state.logged.get(entry.webhook)
            if before == entry or (before is None and not entry.drift):
                continue
            state.logged[entry.webhook] = entry
            if entry.drift:
                log.warning(
                    "the live webhook registration misses what the loaded rules need: requests the rules act on "
                    "are not sent to the webhook",
                    extra={
                        "configuration": name,
                        "webhook": entry.webhook,
                        "entryFound": entry.found,
                        "missing": list(entry.missing),
                        "unexpectedMatchConditions": list(entry.conditions),
                        "managed": self.manage,
                    },
                )
            else:
                log.info("the live webhook registration sends what the rules need", extra={"webhook": entry.webhook})

    def _snapshot(self) -> tuple[dict[str, Any], dict[str, float | None]]:
        configurations: dict[str, Any] = {}
        checked: dict[str, float | None] = {}
        drift = False
        for kind, name in self._names.items():
            state = self._configurations[kind]
            entries = state.plan.entries if state.plan is not None else ()
            drift = drift or any(e.drift for e in entries)
            configurations[name] = {
                "found": state.found,
                "error": state.error or None,
                "webhooks": {e.webhook: e.detail() for e in entries},
            }
            checked[name] = state.checked
        detail = {
            "managed": self.manage,
            "intervalSeconds": self.interval,
            "generation": self._generation,
            "drift": drift,
            "writer": dict(self._writer) if self.manage else None,
            "configurations": configurations,
        }
        return detail, checked

    # -- life cycle ----------------------------------------------------------------------------
    def _run(self) -> None:
        delay, pause = _BACKOFF_INITIAL, 0.0
        every = min(self._retry, self.interval) if self.manage else self.interval
        while not self._stopping.wait(pause):
            pause = self._poll
            generation = self._rules.generation  # before the rule set: a reload swaps that in first
            ruleset = self._rules.ruleset
            if ruleset is None:
                continue
            now = time.monotonic()
            if generation != self._generation:
                self._generation = generation  # this replica's needs changed: publish them now
            elif now < self._due:
                continue
            try:
                ok = self.sync_once(ruleset)
            except Exception:  # the thread must outlive any surprise; the next pass tries again
                log.exception("webhook registration check failed")
                ok = False
            if ok:
                delay = _BACKOFF_INITIAL
                self._due = now + every
            else:
                # B311: backoff jitter, not a secret
                self._due = now + min(delay, every) * random.uniform(0.8, 1.2)  # nosec B311
                delay = min(delay * 2, every)
        if self.manage:
            self._leave()

    def _leave(self) -> None:
        """Stopping: hand the writer's Lease over and withdraw this replica's needs."""
        for step in (self.leases.release, self.leases.withdraw):
            try:
                step()
            except LeaseError as error:
                log.warning("registration lease not released", extra={"error": str(error)})


_BACKOFF_INITIAL = 1.0


def _answer(status: int, body: Any) -> str:
    message = body.get("message") if isinstance(body, dict) else None
    hint = " (RBAC: the ServiceAccount may get and update the two configurations by name)" if status == 403 else ""
    return f"HTTP {status}: {message or 'no details'}{hint}"
