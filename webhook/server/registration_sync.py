"""The server keeps its two webhook configurations sending what its loaded rules need.

webhook/install/registration.py derives each known entry's `rules` and `matchConditions` from a rule set;
this module compares them with the live `gpu-webhook-mutating` / `gpu-webhook-validating` and, when
it manages them, writes those two fields and nothing else (not failurePolicy, namespaceSelector,
clientConfig and its caBundle, timeoutSeconds, nor entries it does not know). A configuration that
does not exist is reported, never created: what to install, and where, is the installer's choice.

Several replicas run, and during a ConfigMap change kubelet updates their mounts seconds to a minute
apart, so for a while replicas hold different rule sets. Two kinds of pass keep them from fighting:

- After start-up and after each successful reload of its own rules, a replica writes its exact
  derived fields (the one moment it may narrow the registration: its rules just changed).
- Every `interval` seconds it checks the live configurations and repairs only *drift*: a
  (group, version, resource, operation) its rules need that no live rule sends, or a live
  matchCondition its derived set does not have (one that could skip a request its rules act on).
  The repair widens: it appends the missing rules and drops those conditions, never removing a
  rule. A replica still on the old rules therefore never undoes a newer replica's additions, and a
  newer one sees nothing missing in a registration widened for an older one; once every replica has
  reloaded, the last exact write leaves the registration exactly as the rules derive it.

With management off (`serve --manage-registration=false`: GitOps owns the configurations) the same
checks run and only report: the /readyz detail, the gauge `gpu_webhook_registration_drift` per
configuration and webhook, and a warning naming what is missing. Drift never makes a replica
unready: a webhook that is not ready refuses or skips every request, which is worse than one that
misses some.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from kubernetes.client import ApiClient

from webhook.engine import RuleSet
from webhook.install.registration import CONFIGURATION_NAMES, ENTRIES, derive, entry_fields
from webhook.kube import rest
from webhook.kube.background import BackgroundThread
from webhook.server.metrics import Metrics

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


def widened(live: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the live entry that also sends what `fields` need: the derived rules it lacks appended,
    the matchConditions the derived set does not have dropped. Nothing it sends is taken away."""
    out = copy.deepcopy(dict(live))
    rules = list(out.get("rules") or [])
    for rule in fields["rules"]:
        if uncovered(rules, [rule]):
            rules.append(copy.deepcopy(dict(rule)))
    out["rules"] = rules
    wanted = [_condition(c) for c in fields.get("matchConditions") or ()]
    conditions = [c for c in out.get("matchConditions") or () if _condition(c) in wanted]
    if conditions:
        out["matchConditions"] = conditions
    else:
        out.pop("matchConditions", None)
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


def plan(live: Mapping[str, Any], ruleset: RuleSet, *, exact: bool) -> Plan:
    """What the live configuration (as GET returns it) lacks, and what to write.

    `exact`: each known entry present gets exactly its derived fields (no write when it has them).
    Otherwise only a drifting entry is written, widened (see `widened`). Entries absent from the
    configuration are reported and never added.
    """
    kind = live.get("kind")
    present = {w.get("name"): w for w in live.get("webhooks") or [] if isinstance(w, dict)}
    fields = {e.name: entry_fields(ruleset, e) for e in ENTRIES if e.configuration == kind}
    entries = tuple(entry_drift(name, present.get(name), wanted) for name, wanted in fields.items())
    if exact:
        changed = tuple(n for n, wanted in fields.items() if n in present and not in_step(present[n], wanted))
        desired = derive([live], ruleset)[0] if changed else None
    else:
        changed = tuple(e.webhook for e in entries if e.found and e.drift)
        desired = copy.deepcopy(dict(live)) if changed else None
        if desired is not None:
            desired["webhooks"] = [
                widened(w, fields[w["name"]]) if w.get("name") in changed else w for w in desired["webhooks"]
            ]
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
    """Checks (and, with `manage`, writes) the live webhook configurations from a daemon thread.

    `sync_once(ruleset)` is one pass over both configurations; the thread runs one after each new
    rules generation (exact) and every `interval` seconds (repair or report only).
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
    ) -> None:
        super().__init__()
        self._api = api_client
        self._rules = rules
        self.manage = manage
        self.interval = interval
        self._metrics = metrics
        self._names = dict(names)  # kind -> name
        self._timeout = request_timeout
        # the rule store is polled, not called back: a reload is a reference swap on another thread,
        # and a second's delay before the write is nothing next to kubelet's mount updates
        self._poll = poll
        self._configurations = {kind: _Configuration() for kind in self._names}
        # configurations still to get this replica's exact fields (a new rules generation, or
        # one that did not exist, or could not be written, when that generation came)
        self._exact_pending: set[str] = set(self._names)
        self._generation: int | None = None
        self._due = 0.0
        # (detail, name -> monotonic time of its last read): swapped whole, read by the event loop
        self._published: tuple[dict[str, Any], dict[str, float | None]] = self._snapshot()
        self.writes = 0  # PUTs that succeeded (tests)

    # -- what the event loop reads ------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """For /readyz: managed or report-only, and per configuration and webhook whether it drifts."""
        detail, checked = self._published
        now = time.monotonic()
        configurations = {}
        for name, found in detail["configurations"].items():
            at = checked[name]
            configurations[name] = {**found, "lastCheckAgeSeconds": None if at is None else round(now - at, 1)}
        return {**detail, "configurations": configurations}

    @property
    def drift(self) -> bool:
        return bool(self._published[0]["drift"])

    # -- one pass ------------------------------------------------------------------------------
    def sync_once(self, ruleset: RuleSet) -> bool:
        """Check both configurations (writing when managed); False when a read or write failed."""
        ok = True
        for kind, name in self._names.items():
            state = self._configurations[kind]
            try:
                self._sync_configuration(kind, name, ruleset, state)
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
        self._published = self._snapshot()
        return ok

    def _sync_configuration(self, kind: str, name: str, ruleset: RuleSet, state: _Configuration) -> None:
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
                return  # stays pending: when it appears, it gets this replica's exact fields
            if status != 200 or not isinstance(live, dict):
                raise SyncError(f"GET {path}: {_answer(status, live)}")
            state.found, state.checked = True, time.monotonic()
            exact = kind in self._exact_pending
            # without managedFields the apiserver keeps its own record (and adds this write to it)
            metadata = {k: v for k, v in (live.get("metadata") or {}).items() if k != "managedFields"}
            live = {**live, "metadata": metadata}
            state.plan = plan(live, ruleset, exact=exact)
            if not self.manage or state.plan.desired is None:
                if self.manage:
                    self._exact_pending.discard(kind)  # in step
                return
            status, stored = self._request("PUT", path, state.plan.desired, [("fieldManager", FIELD_MANAGER)])
            if status == 409:
                continue  # changed since our GET (another replica, cert-manager's CA injection): read again
            if status != 200 or not isinstance(stored, dict):
                raise SyncError(f"PUT {path}: {_answer(status, stored)}")
            self.writes += 1
            reason = "reload" if exact else "repair"
            if self._metrics is not None:
                self._metrics.registration_writes.labels(name, reason).inc()
            log.info(
                "webhook configuration updated from the loaded rules",
                extra={
                    "configuration": name,
                    "webhooks": list(state.plan.changed),
                    "reason": reason,
                    "generation": self._rules.generation,
                    "repaired": {e.webhook: e.detail() for e in state.plan.entries if e.drift},
                },
            )
            self._exact_pending.discard(kind)
            state.plan = plan(stored, ruleset, exact=False)
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
            "configurations": configurations,
        }
        return detail, checked

    # -- life cycle ----------------------------------------------------------------------------
    def _run(self) -> None:
        delay, pause = _BACKOFF_INITIAL, 0.0
        while not self._stopping.wait(pause):
            pause = self._poll
            ruleset, generation = self._rules.ruleset, self._rules.generation
            if ruleset is None:
                continue
            now = time.monotonic()
            if generation != self._generation:
                self._generation = generation
                self._exact_pending = set(self._names)  # this replica's rules changed: write them exactly
            elif now < self._due:
                continue
            try:
                ok = self.sync_once(ruleset)
            except Exception:  # the thread must outlive any surprise; the next pass tries again
                log.exception("webhook registration check failed")
                ok = False
            if ok:
                delay = _BACKOFF_INITIAL
                self._due = now + self.interval
            else:
                # B311: backoff jitter, not a secret
                self._due = now + min(delay, self.interval) * random.uniform(0.8, 1.2)  # nosec B311
                delay = min(delay * 2, self.interval)


_BACKOFF_INITIAL = 1.0


def _answer(status: int, body: Any) -> str:
    message = body.get("message") if isinstance(body, dict) else None
    hint = " (RBAC: the ServiceAccount may get and update the two configurations by name)" if status == 403 else ""
    return f"HTTP {status}: {message or 'no details'}{hint}"
