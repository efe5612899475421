"""`audit --jobs N`: files audited by N worker processes, results reported in input order.

Parsing and evaluation are CPU-bound Python, so threads would not help: each worker process
reads whole files (a file is the unit: document order and `file#N` origins stay as they are),
runs the same `audit()` with the same NamespaceContext, and sends back what the reports need
(each ObjectResult as plain values with its diff rendered, and the problems and notes met, in order).
The parent feeds them to the tally and the report exactly as `--jobs 1` does, file by file,
so the output is the same bytes. At most 2N files are in flight: memory stays bounded.

Namespace objects count wherever they are in the files (the command scans for them first,
for --jobs 1 too). PriorityClasses, DRA claims and Kueue objects count from where they appear, which a
worker cannot know for files before its own: `plan()` keeps such inputs serial.
"""

from __future__ import annotations

import multiprocessing
import re
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from webhook.engine import Mode, Result, RuleOutcome, RuleSet, shared_outcome

from .context import NamespaceContext
from .formats.structured import JsonEntries
from .results import ObjectRef, ObjectResult, Tally, audit
from .sources import read_manifests

# order-dependent cluster context (context.py _CLUSTER_CONTEXT_KINDS): what makes a file unsafe to split
_CONTEXT_KINDS = (
    rb"(PriorityClass|ResourceClaim|ResourceClaimTemplate|GPUPolicyException|LocalQueue|ClusterQueue|ResourceFlavor)"
)
_ORDERED_CONTEXT = re.compile(rb"kind:\s*[\"']?" + _CONTEXT_KINDS + rb"\b|\"kind\"\s*:\s*\"" + _CONTEXT_KINDS + rb"\"")

# ("result", ObjectResult) | ("problem", message) | ("note", message); with `entries` (the JSON
# report): ("entry", bytes) per object and ("tally", Tally) per file instead of results
Event = tuple[str, Any]
_RESULTS = {r.value: r for r in Result}

_worker: dict[str, Any] = {}


def parallel_safe(files: list[str]) -> bool:
    """Whether the files can be audited apart: no stdin, and no order-dependent cluster context."""
    for path in files:
        if path == "-":
            return False
        try:
            if _ORDERED_CONTEXT.search(Path(path).read_bytes()):
                return False
        except OSError:
            continue  # the worker reports it as a problem, in its place
    return True


def _init(
    ruleset: RuleSet,
    namespaces: dict[str, dict[str, Any]],
    default_namespace: str | None,
    mode: Mode,
    diffs: bool,
    entries: bool = False,
) -> None:
    _worker.update(ruleset=ruleset, namespaces=namespaces, default_namespace=default_namespace, mode=mode, diffs=diffs)
    _worker["entries"] = JsonEntries() if entries else None


def _audit_file(path: str) -> list[Event]:
    events: list[Event] = []
    context = NamespaceContext(_worker["namespaces"], _worker["default_namespace"])
    items = read_manifests(
        [path],
        problems=lambda message: events.append(("problem", message)),
        notes=lambda message: events.append(("note", message)),
    )
    results = audit(_worker["ruleset"], items, context, _worker["mode"], _worker["diffs"])
    entries: JsonEntries | None = _worker["entries"]
    if entries is None:
        events.extend(("result", pack(result)) for result in results)
        return events
    # the JSON report's bytes and the file's counts: the parent, which writes every object
    # alone, only copies bytes and adds counts (nothing to rebuild, a fraction to unpickle)
    tally = Tally()
    for result in results:
        tally.add(result)
        events.append(("entry", entries.entry(result)))
    events.append(("tally", tally))
    return events


def pack(result: ObjectResult) -> tuple[Any, ...]:
    """What the reports need of a result, as plain values with the diff rendered: pickling the
    dataclasses and enums themselves cost more than auditing the object (800 µs against 400).
    An outcome with nothing of its own (RuleOutcome.plain) goes as (rule, result, reason)
    and comes back as the engine's shared instance (webhook.engine.shared_outcome): the parent, which
    reports every object alone, builds only the outcomes that say something."""
    ref = result.ref
    outcomes = [
        (o.rule, o.result.value, o.reason)
        if o.plain
        else (o.rule, o.result.value, o.messages, o.patch, o.blocks, o.relaxed, o.reason)
        for o in result.outcomes
    ]
    return (ref.api_version, ref.kind, ref.namespace, ref.name, ref.uid, result.origin, result.gpus, outcomes,
            result.patch, result.diff())  # fmt: skip


def unpack(packed: tuple[Any, ...]) -> ObjectResult:
    outcomes = [
        shared_outcome(o[0], _RESULTS[o[1]], o[2]) if len(o) == 3 else RuleOutcome(o[0], _RESULTS[o[1]], *o[2:])
        for o in packed[7]
    ]
    return ObjectResult(ObjectRef(*packed[:5]), packed[5], packed[6], outcomes, packed[8], {}, None, packed[9])


def audit_files(
    files: list[str],
    jobs: int,
    ruleset: RuleSet,
    namespaces: dict[str, dict[str, Any]],
    default_namespace: str | None,
    mode: Mode = Mode.ENFORCE,
    diffs: bool = True,
    entries: bool = False,
) -> Iterator[Event]:
    """The events of every file, in file order, from `jobs` worker processes (`entries`: the
    JSON report's entry bytes and a tally per file instead of results)."""
    # fork shares the loaded rules with the workers; spawn (macOS) pickles them once per worker
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    with context.Pool(jobs, _init, (ruleset, namespaces, default_namespace, mode, diffs, entries)) as pool:
        pending: deque[Any] = deque()
        queue: Iterable[str] = iter(files)
        for path in queue:
            pending.append(pool.apply_async(_audit_file, (path,)))
            if len(pending) >= 2 * jobs:
                yield from _events(pending.popleft().get())
        while pending:
            yield from _events(pending.popleft().get())


def _events(events: list[Event]) -> Iterator[Event]:
    for kind, value in events:
        yield (kind, unpack(value)) if kind == "result" else (kind, value)
