"""Each replica's view of each policy object, written into the object's status.

The status of a GPUPolicy (or GPUPolicyOverlay) holds, as Gatekeeper's `byPod` does, one entry per
server replica: the generation of the object that replica runs and whether its last load took the
current one; and a `Ready` condition summing them up (True when every replica listed runs the current
generation), with the loader's and lint's messages and field paths when it does not. On a replica that
manages the registration, the current generation counts only once the live registration sends what
the rules that took it in use need (reason `NotRegistered` until then).

No hot loop, no write per replica per second:

- the wanted status is a pure function of the replica's last load and of the live `byPod` list, so
  two replicas never undo each other's writes (each owns its own entry; the condition is computed
  from the whole list, the same way by everyone);
- a replica compares the wanted status with the one its watch cache holds, and writes only when they
  differ (after its own load changed, or when the object is new); an object whose spec changed since
  the last load is left alone until the reload that follows has run;
- writes go to the status subresource: GET, then PUT with the resourceVersion read, again on 409.

Entries of replicas that are gone are dropped when a replica writes, if it can tell (`replica_exists`,
a GET of the pod in the server's own namespace), and every `prune_interval` seconds it looks for them
(one GET per other replica named, not per object); without `replica_exists` they stay.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson
from kubernetes.client import ApiClient

from webhook.engine import LoadError
from webhook.engine.documents import API_VERSION, POLICY_RESOURCES
from webhook.kube import rest
from webhook.kube.background import BackgroundThread
from webhook.kube.policyobjects import PolicyObject, errors_about, summary

log = logging.getLogger("gpu_webhook.policies")
READY = "Ready"
CONFLICT_RETRIES = 5
Key = tuple[str, str, str]  # (kind, namespace, name)


class LoadState(Protocol):
    """What the writer reads of the server's RuleStore (webhook/server/reload.py)."""

    attempts: int
    errors: list[LoadError]
    attempted: dict[Key, PolicyObject]
    running: dict[Key, int]
    loaded_in: dict[Key, int]
    rejected: dict[Key, list[LoadError]]


class LiveObjects(Protocol):
    """The policy objects as the watch caches hold them (status included)."""

    def objects(self) -> list[dict[str, Any]]: ...


def replica_entry(
    replica: str, obj: PolicyObject, state: LoadState, registered: Callable[[int], bool] | None = None
) -> dict[str, Any]:
    """This replica's entry for one object: the generation it runs, whether it is the current one, and why
    not. With `registered` (whether the live webhook registration sends what the rules of a rules
    generation need), the current generation counts as ready only once the registration sends what the
    rules that took it in use need: until then the requests it acts on may not reach the webhook."""
    entry: dict[str, Any] = {"id": replica}
    running = state.running.get(obj.key)
    if running is not None:
        entry["observedGeneration"] = running
    errors = state.rejected.get(obj.key) or errors_about(state.errors, obj.label)
    entry["ready"] = running == obj.generation and not errors
    if entry["ready"] and registered is not None and not registered(state.loaded_in.get(obj.key, 0)):
        entry["ready"] = False
        entry["reason"] = "NotRegistered"
        entry["message"] = (
            "loaded, but the live webhook registration does not send what the rules need yet: requests they "
            "act on may not reach the webhook (the server's /readyz, registration, names what is missing)"
        )
    elif errors:
        entry["reason"] = "Invalid"
        entry["message"] = summary(errors)
        if running is not None and running != obj.generation:
            entry["message"] += f"\ngeneration {running} stays in use"
    elif running != obj.generation:
        entry["reason"] = "NotLoaded"
        elsewhere = len(state.errors)
        entry["message"] = (
            f"the rule files did not load ({elsewhere} problem(s): see the server's "
            "/readyz and log); the last good rules stay in use"
            if elsewhere
            else "not loaded yet"
        )
    return entry


def wanted_status(
    live: Mapping[str, Any] | None, obj: PolicyObject, entry: dict[str, Any], now: str, keep: Callable[[str], bool]
) -> dict[str, Any]:
    """The status to write: the live `byPod` with this replica's entry in it, and the Ready condition of them all."""
    live = live or {}
    by_pod = {e["id"]: e for e in live.get("byPod") or () if isinstance(e, dict) and "id" in e and keep(e["id"])}
    by_pod[entry["id"]] = entry
    entries = [by_pod[name] for name in sorted(by_pod)]
    behind = [e for e in entries if not (e.get("ready") and e.get("observedGeneration") == obj.generation)]
    if behind:
        first = behind[0]
        reason = "Invalid" if any(e.get("reason") == "Invalid" for e in behind) else first.get("reason", "NotLoaded")
        message = f"{len(behind)} of {len(entries)} replica(s) do not run generation {obj.generation}: " + (
            f"{first['id']}: {first.get('message', 'runs an older generation')}"
        )
        condition = {"type": READY, "status": "False", "reason": reason, "message": message}
    else:
        condition = {
            "type": READY,
            "status": "True",
            "reason": "Loaded",
            "message": f"{len(entries)} replica(s) run generation {obj.generation}",
        }
    condition["observedGeneration"] = obj.generation
    previous = next((c for c in live.get("conditions") or () if isinstance(c, dict) and c.get("type") == READY), {})
    same = previous.get("status") == condition["status"] and previous.get("lastTransitionTime")
    condition["lastTransitionTime"] = previous["lastTransitionTime"] if same else now
    return {"observedGeneration": obj.generation, "conditions": [condition], "byPod": entries}


def same_status(live: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Equal but for the condition's lastTransitionTime (which a write keeps when the status stays)."""

    def comparable(status: Mapping[str, Any] | None) -> Any:
        status = dict(status or {})
        status["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or ()
        ]
        return status

    return bool(comparable(live) == comparable(wanted))


class StatusWriter(BackgroundThread):
    """Writes this replica's view of every policy object whose status lacks it, from a daemon thread."""

    thread_name = "policy-status"

    def __init__(
        self,
        api_client: ApiClient,
        state: LoadState,
        live: LiveObjects,
        replica: str,
        *,
        poll: float = 1.0,
        prune_interval: float = 60.0,
        replica_exists: Callable[[str], bool] | None = None,
        registered: Callable[[int], bool] | None = None,
        on_write: Callable[[str], None] | None = None,
        request_timeout: tuple[float, float] = (5.0, 10.0),
    ) -> None:
        super().__init__()
        self._api = api_client
        self._state = state
        self._live = live
        self.replica = replica
        self._poll = poll
        self._prune_interval = prune_interval
        self._prune_due = time.monotonic() + prune_interval
        self._replica_exists = replica_exists
        self._registered = registered
        self._on_write = on_write  # kind of each write: the metric
        self._timeout = request_timeout
        self.writes = 0
        self.failures = 0

    def pass_once(self) -> int:
        """Compare every object's live status with the wanted one and write those that differ; returns writes."""
        state = self._state
        attempted = dict(state.attempted)
        written = 0
        gone = self._gone_replicas()
        for raw in self._live.objects():
            metadata = raw.get("metadata") or {}
            key: Key = (str(raw.get("kind")), str(metadata.get("namespace") or ""), str(metadata.get("name")))
            obj = attempted.get(key)
            if obj is None or obj.generation != metadata.get("generation") or obj.uid != metadata.get("uid"):
                continue  # changed since the last load: the reload that follows decides
            entry = replica_entry(self.replica, obj, state, self._registered)
            wanted = wanted_status(raw.get("status"), obj, entry, _now(), lambda name: name not in gone)
            if same_status(raw.get("status"), wanted):
                continue
            if self._write(obj, entry):
                written += 1
        return written

    def _gone_replicas(self) -> frozenset[str]:
        """Every `prune_interval`: the other replicas named in some status whose pod is gone."""
        if self._replica_exists is None or time.monotonic() < self._prune_due:
            return frozenset()
        self._prune_due = time.monotonic() + self._prune_interval
        named = {
            str(entry.get("id"))
            for raw in self._live.objects()
            for entry in (raw.get("status") or {}).get("byPod") or ()
            if isinstance(entry, dict) and entry.get("id") != self.replica
        }
        return frozenset(name for name in named if not self._keep(name))

    def _write(self, obj: PolicyObject, entry: dict[str, Any]) -> bool:
        resource = POLICY_RESOURCES[obj.kind]
        where = f"/namespaces/{obj.namespace}" if obj.namespace else ""
        path = f"/apis/{API_VERSION}{where}/{resource.plural}/{obj.name}/status"
        for _attempt in range(CONFLICT_RETRIES):
            status, live = self._request("GET", path)
            if status == 404:
                return False  # deleted meanwhile
            if status != 200 or not isinstance(live, dict):
                self._failed(path, status, live)
                return False
            if (live.get("metadata") or {}).get("generation") != obj.generation:
                return False  # changed since the load: the next load decides
            wanted = wanted_status(live.get("status"), obj, entry, _now(), self._keep)
            if same_status(live.get("status"), wanted):
                return False
            live["status"] = wanted
            live["metadata"].pop("managedFields", None)
            status, answer = self._request("PUT", path, live)
            if status == 409:
                continue  # another replica wrote meanwhile: read again
            if status != 200:
                self._failed(path, status, answer)
                return False
            self.writes += 1
            if self._on_write is not None:
                self._on_write(obj.kind)
            log.info(
                "policy status written",
                extra={"policy": obj.label, "generation": obj.generation, "ready": wanted["conditions"][0]["status"]},
            )
            return True
        self._failed(path, 409, {"message": f"still conflicting after {CONFLICT_RETRIES} attempts"})
        return False

    def _keep(self, replica: str) -> bool:
        """Whether another replica's entry stays: it does unless that replica is known to be gone."""
        if replica == self.replica or self._replica_exists is None:
            return True
        try:
            return self._replica_exists(replica)
        except Exception:  # cannot tell: keep it
            return True

    def _failed(self, path: str, status: int, body: Any) -> None:
        self.failures += 1
        message = body.get("message") if isinstance(body, dict) else None
        log.warning("policy status not written", extra={"path": path, "status": status, "error": message})

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        try:
            response = rest.send(self._api, method, path, None, body, timeout=self._timeout)
            data = response.read()
        except Exception as error:  # network: the next pass tries again
            return 0, {"message": f"{type(error).__name__}: {error}"}
        try:
            return response.status, orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            return response.status, None

    # -- life cycle ----------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.wait(self._poll):
            try:
                self.pass_once()
            except Exception:  # the thread must outlive any surprise; the next pass tries again
                log.exception("policy status pass failed")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
