"""Who writes the registration, and what each live replica needs of it: coordination.k8s.io/v1 Leases.

Two kinds of Lease in the webhook's namespace:

- `gpu-webhook-registration`: the writer's. Elected the way client-go's leader election does it
  (kubernetes/kubernetes staging/src/k8s.io/client-go/tools/leaderelection/leaderelection.go,
  `tryAcquireOrRenew`): a replica may take the Lease when it has no holder, or when the record it
  holds has not changed for `leaseDurationSeconds` *as this replica observed it* (its own monotonic
  clock from the moment it first saw that record, never the writer's `renewTime`, so clock skew
  between nodes cannot hand the Lease over early); the holder renews it; every write carries the
  resourceVersion it read, so two candidates cannot both win (409 Conflict); `leaseTransitions`
  counts hand-overs; a replica that stops releases it (holder emptied, duration 1 s:
  `ReleaseOnCancel`).
- `gpu-webhook-needs-<replica>`: one per replica, labelled `gpu-webhook.io/registration-needs`,
  renewed the same way, whose annotation holds what that replica's loaded rules derive for every
  entry (zlib + base64 of the JSON, ~2 KB for the shipped pack) and its digest. A record counts while
  it is live by the same observed-time rule; a replica deletes its own when it stops.

The writer takes the union over live records (webhook/server/registration_sync.py `union`). A
replica that publishes no record (a release before this one, or one that cannot write Leases) is
found as a Pod of the Deployment (label `app.kubernetes.io/name=gpu-webhook`, not Succeeded or
Failed) without a live record: while one is alive, its needs are unknown, so the writer also keeps
everything the live configuration sends. When the Pods cannot be listed the writer assumes such a
replica exists. Either way the registration only narrows once every live replica has said what it
needs.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

LEADER = "gpu-webhook-registration"
RECORD_PREFIX = "gpu-webhook-needs-"
RECORD_LABEL = "gpu-webhook.io/registration-needs"
NEEDS = "gpu-webhook.io/registration-needs"  # the annotation: zlib + base64 of {entry name: fields}
DIGEST = "gpu-webhook.io/registration-needs-digest"
REPLICA_SELECTOR = "app.kubernetes.io/name=gpu-webhook"
LEASE_DURATION = 15.0  # client-go's default LeaseDuration
# a needs record is far smaller than the apiserver's 256 KiB for all annotations; one that inflates past
# this is not read (it comes from a replica of the same ServiceAccount, but a bound costs nothing)
MAX_NEEDS_BYTES = 1 << 20

# (status, parsed body) of one request: method, path, body, query
Request = Callable[[str, str, Any, "list[tuple[str, Any]] | None"], tuple[int, Any]]


class LeaseError(Exception):
    """A Lease or Pod read or write failed (network, RBAC, conflicts)."""


def micro_time(at: float) -> str:
    """A metav1.MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_name(identity: str) -> str:
    """The needs record of a replica: a DNS subdomain however the identity is spelled."""
    tail = re.sub(r"[^a-z0-9.-]+", "-", identity.lower()).strip("-.")[: 253 - len(RECORD_PREFIX)]
    return RECORD_PREFIX + (tail or "replica")


def encode_needs(needs: Mapping[str, Any]) -> tuple[str, str]:
    """(annotation value, digest) of a replica's needs: {entry name: {"rules", "matchConditions"}}."""
    raw = orjson.dumps(needs, option=orjson.OPT_SORT_KEYS)
    return base64.b64encode(zlib.compress(raw, 9)).decode(), hashlib.sha256(raw).hexdigest()[:16]


def decode_needs(text: Any) -> dict[str, Any] | None:
    """The needs an annotation holds, or None when it is not one (unreadable, too large, not a map)."""
    if not isinstance(text, str):
        return None
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(text, validate=True), MAX_NEEDS_BYTES)
        if inflater.unconsumed_tail:
            return None
        needs = orjson.loads(raw)
    except (ValueError, zlib.error, orjson.JSONDecodeError):
        return None
    if not isinstance(needs, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("rules"), list) for v in needs.values()
    ):
        return None
    return needs


@dataclass(frozen=True)
class Need:
    """One live replica's record: who, and the fields its rules derive per entry."""

    identity: str
    digest: str
    fields: dict[str, Any]


@dataclass
class _Observed:
    """client-go's observedRecord/observedTime per Lease: a record is live for its duration after it was
    last seen to change, on this replica's monotonic clock."""

    seen: dict[str, tuple[Any, float]] = field(default_factory=dict)

    def live(self, name: str, lease: Mapping[str, Any], now: float) -> bool:
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        before = self.seen.get(name)
        if before is None or before[0] != record:
            self.seen[name] = before = (record, now)
        duration = spec.get("leaseDurationSeconds")
        return bool(record[0]) and isinstance(duration, int) and now - before[1] < duration


class Leases:
    """This replica's side of the two kinds of Lease (see the module docstring)."""

    def __init__(self, request: Request, namespace: str, identity: str, *, duration: float = LEASE_DURATION) -> None:
        self._request = request
        self.namespace = namespace
        self.identity = identity
        self.duration = max(1, round(duration))
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._observed = _Observed()
        self.leader = False
        self.holder: str | None = None  # the writer as last read
        self.transitions = 0
        self._leader_renewed = 0.0  # monotonic time of the last successful renewal
        self._published: str | None = None  # the digest of the record last written
        self._record_renewed = 0.0

    # -- the writer -----------------------------------------------------------------------------
    def elect(self, now: float | None = None) -> bool:
        """Acquire or renew the writer's Lease; whether this replica is the writer now.

        A failed read or write keeps the leadership only while the last renewal is within the lease
        duration (client-go's renewDeadline), so a replica cut off from the apiserver stops writing
        before another can take over."""
        now = time.monotonic() if now is None else now
        try:
            self.leader = self._try_acquire_or_renew(now)
        except LeaseError:
            self.leader = self.leader and now - self._leader_renewed < self.duration * 2 / 3
            raise
        return self.leader

    def _try_acquire_or_renew(self, now: float) -> bool:
        path = f"{self._path}/{LEADER}"
        status, lease = self._request("GET", path, None, None)
        wall = time.time()
        mine = {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration, "renewTime": micro_time(wall)}
        if status == 404:
            body = _lease(LEADER, self.namespace, {**mine, "acquireTime": micro_time(wall), "leaseTransitions": 0})
            status, made = self._request("POST", self._path, body, None)
            if status == 409:
                return False  # another replica created it first
            _check("POST", path, status, made)
            self._won(made, now)
            return True
        _check("GET", path, status, lease)
        spec = dict(lease.get("spec") or {})
        live = self._observed.live(LEADER, lease, now)
        self.holder = spec.get("holderIdentity") or None
        self.transitions = int(spec.get("leaseTransitions") or 0)
        if live and self.holder != self.identity:
            return False
        if self.holder == self.identity and now - self._leader_renewed < self.duration / 3 and self.leader:
            return True  # renewed recently enough: a write every third of the duration
        if self.holder != self.identity:
            mine["acquireTime"] = micro_time(wall)
            mine["leaseTransitions"] = self.transitions + 1
        lease["spec"] = {**spec, **mine}
        status, stored = self._request("PUT", path, lease, None)
        if status == 409:
            return False  # changed since the read: someone else renewed or took it
        _check("PUT", path, status, stored)
        self._won(stored, now)
        return True

    def _won(self, lease: Mapping[str, Any], now: float) -> None:
        self._observed.live(LEADER, lease, now)
        self.holder = self.identity
        self.transitions = int((lease.get("spec") or {}).get("leaseTransitions") or 0)
        self._leader_renewed = now

    def release(self) -> None:
        """Give the writer's Lease up (holder emptied, duration 1 s), when this replica holds it."""
        if not self.leader:
            return
        self.leader = False
        path = f"{self._path}/{LEADER}"
        status, lease = self._request("GET", path, None, None)
        if status != 200 or not isinstance(lease, dict):
            return
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return
        lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time(time.time())}
        self._request("PUT", path, lease, None)

    # -- the records -----------------------------------------------------------------------------
    def publish(self, needs: Mapping[str, Any], now: float | None = None) -> bool:
        """Write this replica's record when its needs changed or a third of its duration passed; whether
        it wrote."""
        now = time.monotonic() if now is None else now
        value, digest = encode_needs(needs)
        if digest == self._published and now - self._record_renewed < self.duration / 3:
            return False
        name = record_name(self.identity)
        path = f"{self._path}/{name}"
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "renewTime": micro_time(time.time()),
        }
        annotations = {NEEDS: value, DIGEST: digest}
        status, lease = self._request("GET", path, None, None)
        if status == 404:
            body = _lease(name, self.namespace, spec, annotations)
            status, made = self._request("POST", self._path, body, None)
            _check("POST", path, status, made)
        else:
            _check("GET", path, status, lease)
            metadata = dict(lease.get("metadata") or {})
            metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
            metadata["labels"] = {**(metadata.get("labels") or {}), RECORD_LABEL: "record"}
            body = {**lease, "metadata": metadata, "spec": {**(lease.get("spec") or {}), **spec}}
            status, stored = self._request("PUT", path, body, None)
            _check("PUT", path, status, stored)
        self._published, self._record_renewed = digest, now
        return True

    def withdraw(self) -> None:
        """Delete this replica's record (it stops serving: the writer may narrow once it is gone)."""
        if self._published is None:
            return
        self._published = None
        self._request("DELETE", f"{self._path}/{record_name(self.identity)}", None, None)

    def needs(self, now: float | None = None) -> list[Need]:
        """Every live record, in digest order (the same union whoever writes)."""
        now = time.monotonic() if now is None else now
        status, listing = self._request("GET", self._path, None, [("labelSelector", RECORD_LABEL)])
        _check("GET", self._path, status, listing)
        out = []
        for lease in listing.get("items") or []:
            if not isinstance(lease, dict):
                continue
            name = str((lease.get("metadata") or {}).get("name"))
            if not self._observed.live(name, lease, now):
                continue
            annotations = (lease.get("metadata") or {}).get("annotations") or {}
            fields = decode_needs(annotations.get(NEEDS))
            identity = (lease.get("spec") or {}).get("holderIdentity")
            if fields is None or not isinstance(identity, str):
                raise LeaseError(f"Lease {self.namespace}/{name}: its {NEEDS} annotation is not a needs record")
            out.append(Need(identity, str(annotations.get(DIGEST) or ""), fields))
        return sorted(out, key=lambda n: (n.digest, n.identity))

    def unknown_replicas(self, known: set[str]) -> list[str]:
        """Pods of the Deployment that are not done and publish no live record (their needs are unknown).

        LeaseError when the Pods cannot be listed: the caller then assumes there are some."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        status, listing = self._request("GET", path, None, [("labelSelector", REPLICA_SELECTOR)])
        _check("GET", path, status, listing)
        out = []
        for pod in listing.get("items") or []:
            name = (pod.get("metadata") or {}).get("name") if isinstance(pod, dict) else None
            phase = (pod.get("status") or {}).get("phase") if isinstance(pod, dict) else None
            if isinstance(name, str) and phase not in ("Succeeded", "Failed") and name not in known:
                out.append(name)
        return sorted(out)


def _lease(
    name: str, namespace: str, spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/name": "gpu-webhook"},
    }
    if annotations is not None:
        metadata["labels"][RECORD_LABEL] = "record"
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": dict(spec)}


def _check(method: str, path: str, status: int, body: Any) -> None:
    if 200 <= status <= 299 and isinstance(body, dict):
        return
    message = body.get("message") if isinstance(body, dict) else None
    hint = (
        " (RBAC: the ServiceAccount's Role in its namespace grants the Leases and the Pods list)"
        if status == 403
        else ""
    )
    raise LeaseError(f"{method} {path}: HTTP {status}: {message or 'no details'}{hint}")
