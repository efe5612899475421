"""Hot reload of rules and of the serving certificate, off the request path.

Both are polled: a stat() of a few files per second is cheap, and polling sees every
way a file can change, including a ConfigMap or Secret mount, where kubelet swaps the
`..data` symlink atomically and no event fires on the visible names themselves.

Rules come from files (`paths`) and, with `serve --policies cluster|both`, from the GPUPolicy and
GPUPolicyOverlay objects of the cluster (`cluster`: their watch caches, webhook/kube/policies.py).
Both go through the one loader in one load (objects after files, oldest first), so an object gets the
same checks and the same hot reload as a file. An object that does not load is the only one left out
(webhook/policies/isolation.py): every file rule and every other object serves, at start-up, at reload
and after a restart, and the object left out is reported (log, /readyz, its status Ready=False,
`gpu_webhook_policy_objects_rejected{kind}`). An object whose new generation is left out keeps running
the generation this replica ran before, as a rule file does (after a restart there is none to keep). A rule file that does not load fails the whole load: the
last good rule set keeps serving (at start-up there is none, and the server does not start). A
change of an object's spec (its generation), labels or annotations is a change of the rules; its
status, written by the replicas themselves, is not.

The caches keep the objects they last listed when the cluster stops answering or forbids the list
(webhook/kube/policies.py), so a replica that loses its read access keeps the policies it had.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from webhook.certs import CERT_FILE, KEY_FILE, certificate_not_after
from webhook.engine import LoadError, RuleSet, rule_files
from webhook.engine.documents import OVERLAY_KIND, POLICY_KIND
from webhook.kube.policies import SpecVersion, spec_version
from webhook.kube.policyobjects import PolicyObject, policy_object, summary
from webhook.policies.files import Fingerprint, RuleFiles, fingerprint
from webhook.policies.isolation import isolated_load, load_order
from webhook.server.build import BuildGuard
from webhook.server.memory import settle
from webhook.server.metrics import Metrics

log = logging.getLogger("gpu_webhook.reload")


class PolicySource(Protocol):
    """The policy objects of the cluster (webhook.kube.PolicyCaches): read from memory, no I/O."""

    @property
    def synced(self) -> bool: ...

    def objects(self) -> list[dict[str, Any]]: ...

    def detail(self) -> dict[str, Any]: ...

    def kinds(self) -> list[str]:
        """The policy kinds the replica reads (the label values of gpu_webhook_policy_source_ready)."""
        ...

    def unavailable(self) -> dict[str, str]:
        """Kind -> why, for each kind the replica must read and has never listed (403, 404, no answer)."""
        ...

    def degraded(self) -> dict[str, str]:
        """Kind -> why, for each kind listed before that cannot be read now (its last objects stay)."""
        ...


REJECTED_KINDS = (POLICY_KIND, OVERLAY_KIND)  # the label values of gpu_webhook_policy_objects_rejected


@dataclass
class RuleStore:
    """The rule set in use. Requests read `ruleset` once; a reload swaps it in one assignment."""

    paths: list[str]
    metrics: Metrics
    cluster: PolicySource | None = None  # policy objects, loaded with the files
    ruleset: RuleSet | None = None
    generation: int = 0
    errors: list[LoadError] = field(default_factory=list)
    attempts: int = 0  # loads tried, successful or not (the status writer follows it)
    # the policy objects of the last load tried, and (kind, namespace, name) -> generation of those in use
    attempted: dict[tuple[str, str, str], PolicyObject] = field(default_factory=dict)
    running: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # (kind, namespace, name) -> the rules generation that took the generation of it in use
    loaded_in: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # the policy objects the last load left out, with why (located at each object)
    rejected: dict[tuple[str, str, str], list[LoadError]] = field(default_factory=dict)
    cluster_loaded: bool = False  # a load has read the policy objects after their caches listed them
    build: BuildGuard | None = None  # refuses a pack of another installed engine; labels the pack in use
    _fingerprint: Fingerprint = ()
    _objects_version: SpecVersion = ()
    _good: dict[tuple[str, str, str], PolicyObject] = field(default_factory=dict)  # the versions in use
    _files: RuleFiles | None = None  # the rule files' documents, parsed again only when they change
    # (kind, namespace, name) -> (the cache's object, it as a loader document): a watch event replaces the
    # object, so an unchanged one is converted once
    _converted: dict[tuple[str, str, str], tuple[dict[str, Any], PolicyObject]] = field(default_factory=dict)

    def _current_fingerprint(self) -> Fingerprint:
        return fingerprint(rule_files(p for p in self.paths if os.path.exists(p)))

    def load(self) -> bool:
        """(Re)load synchronously, leaving out the policy objects that do not load; when a rule file does
        not, keep the last good rule set. Runs in a worker thread."""
        self._fingerprint = self._current_fingerprint()
        refused = self.build.refusal(self.paths) if self.build is not None and self.ruleset is not None else None
        if refused is not None:
            self.metrics.reload_failures.inc()
            self.metrics.reload_ok.set(0)
            log.error("rule reload refused", extra={"error": refused, "kept_generation": self.generation})
            return False
        synced = self.cluster is not None and self.cluster.synced
        raw = self.cluster.objects() if self.cluster is not None else []
        self._objects_version = spec_version(raw)
        objects = [self._document(obj) for obj in sorted(raw, key=load_order)]
        self._converted = {o.key: self._converted[o.key] for o in objects}
        if self._files is None or self._files.paths != self.paths:
            self._files = RuleFiles(self.paths)
        outcome = isolated_load(self._files, objects, self._good)
        self.attempted = {o.key: o for o in objects}
        self.attempts += 1
        self.cluster_loaded = self.cluster_loaded or synced
        self._reject(outcome.rejected)
        result = outcome.result
        if result.ruleset is None:
            self.errors = result.errors
            self.metrics.reload_failures.inc()
            self.metrics.reload_ok.set(0)
            for error in self.errors:
                log.error("rule file rejected", extra={"error": str(error), "kept_generation": self.generation})
            return False
        self._swap(result.ruleset, {o.key: o.generation for o in outcome.loaded})
        self._good = {o.key: o for o in outcome.loaded}
        for obj in outcome.kept:
            log.warning(
                "policy object: its new generation is rejected; the previous one stays in use",
                extra={"policy": obj.label, "generation": obj.generation},
            )
        self.errors = []
        self.metrics.reload_ok.set(1)
        return True

    @property
    def file_reads(self) -> int:
        """How many times the loads read and parsed the rule files (once per content, policies/files.py)."""
        return self._files.reads if self._files is not None else 0

    def _document(self, obj: dict[str, Any]) -> PolicyObject:
        """The cache's object as a loader document, converted again only when the cache holds a new one."""
        metadata = obj.get("metadata") or {}
        key = (str(obj.get("kind") or ""), str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        known = self._converted.get(key)
        if known is not None and known[0] is obj:
            return known[1]
        converted = policy_object(obj)
        self._converted[converted.key] = (obj, converted)
        return converted

    def _reject(self, rejected: dict[tuple[str, str, str], list[LoadError]]) -> None:
        """Keep, count (by kind) and log the policy objects left out of the load."""
        self.rejected = rejected
        for kind in REJECTED_KINDS:
            self.metrics.policy_objects_rejected.labels(kind).set(sum(1 for key in rejected if key[0] == kind))
        for key, errors in rejected.items():
            log.error(
                "policy object rejected; every other rule and policy object serves",
                extra={"policy": "/".join(part for part in key if part), "error": summary(errors)},
            )

    def _swap(self, ruleset: RuleSet, running: dict[tuple[str, str, str], int]) -> None:
        self.ruleset = ruleset
        self.generation += 1
        self.loaded_in = {
            key: self.loaded_in[key]
            if self.running.get(key) == generation and key in self.loaded_in
            else self.generation
            for key, generation in running.items()
        }
        self.running = running
        self.metrics.rules_generation.set(self.generation)
        self.metrics.rules_loaded.set(len(ruleset.rules))
        if self.build is not None:
            self.build.loaded(self.paths)
        log.info(
            "rules loaded",
            extra={"generation": self.generation, "rules": len(ruleset.rules), "policyObjects": len(running)},
        )

    def changed(self) -> bool:
        if self.cluster is not None:
            if self.cluster.synced and not self.cluster_loaded:
                return True  # the caches have listed the cluster since the last load
            if spec_version(self.cluster.objects()) != self._objects_version:
                return True
        return self._current_fingerprint() != self._fingerprint

    def cluster_objects(self) -> list[dict[str, Any]]:
        """The policy objects the caches hold now (none without `cluster`)."""
        return self.cluster.objects() if self.cluster is not None else []

    def cluster_detail(self) -> dict[str, Any]:
        """For /readyz: the policy objects' caches, and which objects the rules in use hold."""
        assert self.cluster is not None
        return {
            "loaded": self.cluster_loaded,
            "caches": self.cluster.detail(),
            "inUse": sorted("/".join(part for part in key if part) for key in self.running),
            "rejected": {
                "/".join(part for part in key if part): summary(e) for key, e in sorted(self.rejected.items())
            },
            # never listed: the replica is not ready; listed before: the last objects serve, not read now
            "unavailable": self.cluster.unavailable(),
            "degraded": self.cluster.degraded(),
        }


@dataclass
class CertificateStore:
    """The TLS context in use; new handshakes pick up a reloaded certificate, open connections keep theirs."""

    cert_dir: str
    context: ssl.SSLContext
    metrics: Metrics
    not_after: float = 0.0
    error: str = ""
    _fingerprint: Fingerprint = ()

    @property
    def files(self) -> list[str]:
        return [str(Path(self.cert_dir) / CERT_FILE), str(Path(self.cert_dir) / KEY_FILE)]

    def load(self) -> bool:
        cert, key = self.files
        self._fingerprint = fingerprint(self.files)
        try:
            # load_cert_chain() on the live context replaces the certificate before it checks the
            # key, so a mismatched pair (cert written before key) would break every new handshake.
            # Read the pair once, prove it in a scratch context, then load those same bytes live.
            with tempfile.TemporaryDirectory(prefix="gpu-webhook-tls-") as scratch:  # mode 0700
                cert_copy, key_copy = Path(scratch) / CERT_FILE, Path(scratch) / KEY_FILE
                cert_copy.write_bytes(Path(cert).read_bytes())
                key_copy.touch(mode=0o600)
                key_copy.write_bytes(Path(key).read_bytes())
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_copy, key_copy)
                not_after = certificate_not_after(cert_copy).timestamp()
                self.context.load_cert_chain(cert_copy, key_copy)
        except (OSError, ssl.SSLError, ValueError) as error:
            self.error = f"cannot load {cert} / {key}: {error}"
            self.metrics.cert_reload_failures.inc()
            log.error("certificate rejected, keeping the previous one", extra={"error": self.error})
            return False
        self.not_after = not_after
        self.error = ""
        self.metrics.cert_expiry.set(self.not_after)
        self.metrics.cert_reloads.inc()
        log.info("certificate loaded", extra={"not_after": self.not_after})
        return True

    @property
    def valid(self) -> bool:
        return self.not_after > time.time()

    def changed(self) -> bool:
        return fingerprint(self.files) != self._fingerprint


# After a policy object's event, how long to wait for the rest of its burst (`kubectl apply -f dir/`):
# one load then takes them all (events coming during a load are taken by the next one).
COALESCE = 0.005


class _Wake:
    """Ends the watcher's wait early when a policy object's watch cache reports an event (on its thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def set(self) -> None:
        """From any thread."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is stopping
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout: float) -> bool:
        """Until an event or `timeout`: whether an event came (its burst included)."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        await asyncio.sleep(COALESCE)
        self._event.clear()
        return True


async def watch(rules: RuleStore, certs: CertificateStore | None, interval: float) -> None:
    """Check for changes forever: every `interval`, and at once when a policy object's cache has an event
    (a source with `subscribe(callback)`, webhook.kube.PolicyCaches), so that a changed GPUPolicy or
    overlay serves within tens of milliseconds, not within the poll. Rule reloads run in a thread so
    requests keep flowing."""
    wake = _Wake(asyncio.get_running_loop())
    subscribe: Callable[[Callable[[], None]], None] | None = getattr(rules.cluster, "subscribe", None)
    if subscribe is not None:
        subscribe(wake.set)
    while True:
        await wake.wait(interval)
        try:
            if rules.changed() and await asyncio.to_thread(rules.load):
                settle()  # the old rule set out of the frozen generation, the new one into it
            if certs is not None and certs.changed():
                # files of a pair are replaced one by one: give the writer a moment to finish
                await asyncio.sleep(min(interval, 0.2))
                # On the loop thread, not a worker: load_cert_chain() sets the certificate, then the
                # key, and a handshake running between the two (on the loop) would fail. The load
                # reads two small files and takes about a millisecond, once per rotation.
                certs.load()
        except Exception:  # the watcher must outlive any surprise; the next tick tries again
            log.exception("reload check failed")
