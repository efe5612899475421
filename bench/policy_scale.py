"""Policy objects at scale: `python -m bench.policy_scale`.

`--policies` (100) GPUPolicies (each a real rule with CEL, scoped to one of the namespaces, as a site
writes per-team rules), `--overlays` (20) GPUPolicyOverlays (each changing params of a pack rule) and
`--exceptions` (2,000) GPUPolicyExceptions (naming pack rules, spread over `--namespaces` (200)
namespaces, some expiring) against the shipped pack alone ("none"), all in one process:

    per request   decide() (the server's handler body: parse, context, evaluate, serialise) of a GPU pod
                  create (/mutate + /validate) in every namespace in turn (half with a team policy), with the namespace's
                  exceptions as the ExceptionCache answers them; p50 of single calls, thread CPU,
                  rounds alternating the two configurations
    full reload   RuleStore.load() (the files and every GPUPolicy and overlay through the one loader)
                  plus the ExceptionCache's list (every exception parsed): thread CPU
    one change    a GPUPolicy, an overlay and an exception changed through their watch caches' entry
                  (`_apply`, the watch thread's) while the server's reload watcher (`reload.watch`,
                  at the server's default interval) runs on its own event loop: wall time from the
                  event to the rule set (or the namespace's exceptions) serving the new version
    memory        RSS added by loading all of it (the policy objects' caches, the rules, the exceptions),
                  over the pack alone

Goals (issue 39): p50 within 1.1x of none, a full reload <= 1 s CPU, one change <= 100 ms, <= +64 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from kubernetes import client

from bench.reviews import bodies
from tests.support import apiserver
from webhook.engine import ClusterContext, Limits, Mode, Phase, RuleSet
from webhook.kube import rest
from webhook.kube.caches import ExceptionCache
from webhook.kube.policies import PolicyCaches
from webhook.server.context import Snapshot
from webhook.server.metrics import Metrics
from webhook.server.reload import RuleStore, watch
from webhook.server.sequence import DecideConfig, Problem, decide

RULES = str(Path(__file__).resolve().parents[1] / "rules")
GROUP_VERSION = "gpu-webhook.io/v1alpha1"
CREATED = "2026-12-01T10:00:00Z"
# pack rules that accept exceptions, which tenants ask to be let through
EXCEPTED_RULES = (
    "gpu-cost-labels",
    "kueue-queue-required",
    "priority-class-allowed",
    "runtime-class-allowed",
    "gpu-node-affinity",
    "gpu-toleration",
    "serving-readiness-probe",
    "spot-training-checkpoint",
)


def namespaces(count: int) -> list[str]:
    return [f"team-{n:03d}" for n in range(count)]


def _metadata(name: str, index: int, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}-{namespace or ''}",
        "generation": 1,
        "resourceVersion": str(1000 + index),
        "creationTimestamp": f"2026-12-01T{10 + index // 3600 % 10:02d}:{index // 60 % 60:02d}:{index % 60:02d}Z",
    }
    if namespace is not None:
        metadata["namespace"] = namespace
    return metadata


# what a site's per-team GPUPolicy checks: four shapes, each with its own text per policy
_POLICY_SHAPES: tuple[Callable[[int], dict[str, Any]], ...] = (
    lambda i: {
        "action": "Deny",
        "validate": {
            "expression": f"containers.all(c, !c.image.endsWith(':latest') && !c.image.startsWith('blocked-{i}.io/'))",
            "message": f"team policy {i}: pin images from an allowed registry",
        },
    },
    lambda i: {
        "action": "Deny",
        "match_gpu": True,
        "validate": {
            "expression": "gpuCount(podSpec) <= int(params.maxGpus)",
            "message": f"team policy {i}: at most {4 + i % 4} GPUs per pod",
        },
        "params": {"maxGpus": 4 + i % 4},
    },
    lambda i: {
        "action": "Warn",
        "validate": {
            "expression": (
                "has(object.metadata.labels) && "
                f"object.metadata.labels.exists(k, k == 'app' || k == 'team-{i}.example.com/owner')"
            ),
            "message": f"team policy {i}: label the pod with its app",
        },
    },
    lambda i: {
        "action": "Deny",
        "validate": {
            "expression": f"containers.all(c, !has(c.env) || c.env.all(e, e.name != 'DEBUG_TEAM_{i}'))",
            "message": f"team policy {i}: no debug switch in production pods",
        },
    },
)


def gpupolicy(index: int, scoped_to: list[str], generation: int = 1) -> dict[str, Any]:
    shape = dict(_POLICY_SHAPES[index % len(_POLICY_SHAPES)](index))
    gpu = shape.pop("match_gpu", False)
    spec: dict[str, Any] = {
        "action": shape.pop("action"),
        "match": {"kinds": ["Pod"], "operations": ["CREATE", "UPDATE"], "namespaces": {"include": scoped_to}},
        **shape,
    }
    if gpu:
        spec["match"]["gpu"] = True
    name = f"team-policy-{index:03d}"
    metadata = {**_metadata(name, index), "generation": generation}
    return {"apiVersion": GROUP_VERSION, "kind": "GPUPolicy", "metadata": metadata, "spec": spec}


# (rule, param, the value a site sets): params of pack rules, each set by one overlay only
def _overlay_changes(spaces: list[str]) -> list[tuple[str, dict[str, Any]]]:
    ceilings = {ns: 4 for ns in spaces[::10]}
    return [
        ("gpu-per-pod-ceiling", {"namespaceCeilings": ceilings}),
        ("gpu-per-pod-ceiling", {"defaultCeiling": 16}),
        ("dra-claim-limits", {"maxDevices": 16}),
        ("dra-pod-claims-resolvable", {"defaultCeiling": 16}),
        ("priority-class-allowed", {"allowed": ["gpu-batch", "gpu-critical", "site-standard"]}),
        ("runtime-class-allowed", {"allowed": ["nvidia", "nvidia-cdi", "kata-nvidia"]}),
        ("mig-profiles", {"defaultProfiles": ["1g.10gb", "2g.20gb", "3g.40gb"]}),
        ("mig-profiles", {"namespaceProfiles": {ns: ["1g.10gb", "2g.20gb"] for ns in spaces[:20]}}),
        ("kueue-queue-required", {"namespaces": spaces[100:140]}),
        ("kueue-priority-class-allowed", {"allowed": ["batch-low", "batch-high"]}),
        ("dra-device-classes-allowed", {"allowed": ["gpu.nvidia.com", "mig.nvidia.com", "site-gpu.example.com"]}),
        ("no-timeslicing-in-production", {"productionValues": ["production", "prod", "live"]}),
        ("production-gpu-placement", {"productionValues": ["production", "prod", "live"]}),
        ("spot-training-checkpoint", {"persistentCsiDrivers": ["ebs.csi.aws.com", "pd.csi.storage.gke.io"]}),
        ("serving-readiness-probe", {"servingKinds": ["Deployment", "StatefulSet"]}),
        ("runtime-class-allowed", {"gpuRuntimeClasses": ["nvidia", "nvidia-cdi"]}),
        ("mig-single-strategy-placement", {"defaultProfiles": ["1g.10gb", "2g.20gb"]}),
        ("priority-class-allowed", {"clusterDefault": "site-standard"}),
        ("kueue-priority-class-allowed", {"annotation": "site.example.com/allowed-workload-priority-classes"}),
        ("dra-claim-limits", {"limitAnnotation": "site.example.com/max-devices-per-claim-request"}),
    ]


def overlay(index: int, rule: str, params: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    name = f"site-overlay-{index:02d}"
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyOverlay",
        "metadata": {**_metadata(name, index), "generation": generation},
        "spec": {"rules": [{"name": rule, "params": params}]},
    }


def overlays(count: int, spaces: list[str]) -> list[dict[str, Any]]:
    changes = _overlay_changes(spaces)
    return [overlay(i, *changes[i % len(changes)]) for i in range(min(count, len(changes)))]


def exception(index: int, namespace: str, version: int | None = None) -> dict[str, Any]:
    """An exception of `namespace` naming one or two pack rules for some pods (by name or label);
    every third expires: a third of those already have."""
    rules = [EXCEPTED_RULES[index % len(EXCEPTED_RULES)]]
    if index % 2:
        rules.append(EXCEPTED_RULES[(index + 3) % len(EXCEPTED_RULES)])
    match: dict[str, Any] = {"kinds": ["Pod", "Job"]}
    if index % 2:
        match["names"] = [f"batch-{index}", f"batch-{index}-retry"]
    else:
        match["objectSelector"] = {"matchLabels": {"exception.example.com/ticket": f"ops-{index}"}}
    spec: dict[str, Any] = {"rules": rules, "match": match, "reason": f"ticket OPS-{index}: migration in progress"}
    if index % 3 == 0:
        spec["expires"] = "2026-11-01T00:00:00Z" if index % 9 == 0 else "2027-06-01T00:00:00Z"
    metadata = _metadata(f"exception-{index:05d}", index, namespace)
    if version is not None:
        metadata["resourceVersion"] = str(version)
    return {"apiVersion": GROUP_VERSION, "kind": "GPUPolicyException", "metadata": metadata, "spec": spec}


def exceptions(count: int, spaces: list[str]) -> list[dict[str, Any]]:
    return [exception(i, spaces[i % len(spaces)]) for i in range(count)]


class _ListAnswer:
    """What rest.get answers a list with: the body the cache parses."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.data = orjson.dumps({"items": items, "metadata": {"resourceVersion": "9999"}})


def listed_exceptions(items: list[dict[str, Any]], cache: ExceptionCache | None = None) -> tuple[ExceptionCache, float]:
    """`cache` (a new one by default) after a list of `items` (the watch thread's full read), and the
    list's thread CPU seconds."""
    cache = cache or ExceptionCache(client.ApiClient(client.Configuration()))
    answer = _ListAnswer(items)
    real_get = rest.get
    rest.get = lambda *_args, **_kwargs: answer  # type: ignore[assignment]  # no apiserver: the list's answer
    try:
        began = time.thread_time()
        cache._list()
        cpu = time.thread_time() - began
    finally:
        rest.get = real_get  # type: ignore[assignment]
    return cache, cpu


def policy_caches(objects: list[dict[str, Any]]) -> PolicyCaches:
    """GPUPolicy and overlay caches holding `objects`, as their watches' first list leaves them."""
    caches = PolicyCaches(client.ApiClient(client.Configuration()))
    for cache in caches.caches:
        cache._synced.set()
        cache._answered.set()
    for obj in objects:
        target = caches.policies if obj["kind"] == "GPUPolicy" else caches.overlays
        target._apply({"type": "ADDED", "object": obj})
    return caches


def rule_store(objects: list[dict[str, Any]]) -> tuple[RuleStore, float]:
    """A RuleStore loaded with the pack and `objects`, and the load's thread CPU seconds."""
    store = RuleStore(paths=[RULES], metrics=Metrics(), cluster=policy_caches(objects))
    began = time.thread_time()
    assert store.load(), store.errors
    cpu = time.thread_time() - began
    assert not store.rejected, store.rejected
    return store, cpu


# -- per request ---------------------------------------------------------------------------------------
def _in_namespace(body: bytes, namespace: str) -> bytes:
    review = orjson.loads(body)
    review["request"]["namespace"] = namespace
    for side in ("object", "oldObject"):
        if isinstance(review["request"].get(side), dict):
            review["request"][side]["metadata"]["namespace"] = namespace
    return orjson.dumps(review)


def _context(snapshot: Snapshot) -> Callable[[Any], Snapshot]:
    return lambda _review: snapshot


def request_samples(ruleset: RuleSet, cache: ExceptionCache | None, spaces: list[str], iterations: int) -> list[float]:
    """Thread CPU µs of each GPU pod create (decide() of /mutate then /validate), namespaces in turn."""
    mutate, validate = bodies("gpu-pod", "mutate")[0], bodies("gpu-pod", "validate")[0]
    phases = [
        (DecideConfig(Phase.MUTATE, Mode.ENFORCE, Limits()), "mutate", mutate),
        (DecideConfig(Phase.VALIDATE, Mode.ENFORCE, Limits()), "validate", validate),
    ]
    calls = []
    for namespace in spaces:
        found = cache.of(namespace) if cache is not None else ()
        snapshot = Snapshot(namespace, apiserver.namespace(namespace), ClusterContext({}, {}, {}, exceptions=found))
        for config, endpoint, body in phases:
            calls.append((config, endpoint, _in_namespace(body, namespace), _context(snapshot)))
    for config, endpoint, body, context in calls:  # warm, and never time a request that fails
        first = decide(ruleset, config, body, endpoint, context)
        if isinstance(first, Problem) or first.rule_errors or first.outcome == "error":
            raise RuntimeError(f"/{endpoint} did not evaluate cleanly: {first}")
    samples = []
    for index in range(iterations):
        spent = 0.0
        for config, endpoint, body, context in calls[index % (len(calls) // 2) * 2 :][:2]:
            began = time.thread_time()
            decide(ruleset, config, body, endpoint, context)
            spent += time.thread_time() - began
        samples.append(spent * 1e6)
    return samples


# -- one change ----------------------------------------------------------------------------------------
class Watcher:
    """The server's reload watcher (`reload.watch`) on an event loop of its own thread."""

    def __init__(self, store: RuleStore, interval: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.task = asyncio.run_coroutine_threadsafe(self._watch(store, interval), self.loop)

    @staticmethod
    async def _watch(store: RuleStore, interval: float) -> None:
        await watch(store, None, interval)

    def stop(self) -> None:
        self.task.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def time_to_serve(apply: Callable[[], None], served: Callable[[], bool], timeout: float = 10.0) -> float:
    """Wall ms from `apply()` (the watch event) until `served()`."""
    began = time.perf_counter()
    apply()
    while not served():
        if time.perf_counter() - began > timeout:
            raise RuntimeError("the change was not served")
        time.sleep(0.001)
    return (time.perf_counter() - began) * 1e3


def changes(
    store: RuleStore,
    cache: ExceptionCache,
    policies: list[dict[str, Any]],
    site: list[dict[str, Any]],
    spaces: list[str],
    count: int,
    interval: float,
) -> dict[str, list[float]]:
    caches = store.cluster
    assert isinstance(caches, PolicyCaches)
    load = store.load

    def timed_load() -> bool:  # the reload's own thread CPU, apart from the wait for a core
        began = time.thread_time()
        try:
            return load()
        finally:
            load_cpu.append((time.thread_time() - began) * 1e3)

    load_cpu: list[float] = []
    store.load = timed_load  # type: ignore[method-assign]
    watcher = Watcher(store, interval)
    found: dict[str, list[float]] = {"GPUPolicy": [], "GPUPolicyOverlay": [], "GPUPolicyException": []}

    def served(key: tuple[str, str, str], generation: int) -> Callable[[], bool]:
        return lambda: store.running.get(key) == generation

    def applied(target: Any, obj: dict[str, Any]) -> Callable[[], None]:
        return lambda: target._apply({"type": "MODIFIED", "object": obj})

    def excepted(namespace: str, reason: str) -> Callable[[], bool]:
        return lambda: any(found.reason == reason for found in cache.of(namespace))

    try:
        for change in range(count):
            time.sleep(interval * ((0.13 + 0.29 * change) % 1.0))  # the event lands anywhere in a poll interval
            policy = copy.deepcopy(policies[change * 7 % len(policies)])
            policy["metadata"]["generation"] += change + 1
            policy["spec"]["validate"]["message"] += f" (revision {change})"
            key = ("GPUPolicy", "", policy["metadata"]["name"])
            found["GPUPolicy"].append(
                time_to_serve(applied(caches.policies, policy), served(key, policy["metadata"]["generation"]))
            )
            time.sleep(interval * 0.37)
            changed = copy.deepcopy(site[change % len(site)])
            changed["metadata"]["generation"] += change + 1
            key = ("GPUPolicyOverlay", "", changed["metadata"]["name"])
            found["GPUPolicyOverlay"].append(
                time_to_serve(applied(caches.overlays, changed), served(key, changed["metadata"]["generation"]))
            )
            index = change * 13
            namespace = spaces[index % len(spaces)]
            updated = exception(index, namespace, version=100_000 + change)
            updated["spec"]["reason"] += f" (revision {change})"
            found["GPUPolicyException"].append(
                time_to_serve(applied(cache, updated), excepted(namespace, updated["spec"]["reason"]))
            )
    finally:
        watcher.stop()
        store.load = load  # type: ignore[method-assign]
    found["reload CPU"] = load_cpu
    return found


# -- memory --------------------------------------------------------------------------------------------
def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", type=int, default=100)
    parser.add_argument("--overlays", type=int, default=20)
    parser.add_argument("--exceptions", type=int, default=2000)
    parser.add_argument("--namespaces", type=int, default=200)
    parser.add_argument(
        "--iterations", type=int, default=400, help="pod creates timed per round, configuration and group"
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--changes", type=int, default=5, help="changes of each kind timed")
    parser.add_argument("--interval", type=float, default=1.0, help="the reload watcher's poll (serve's default)")
    args = parser.parse_args(argv)
    spaces = namespaces(args.namespaces)
    policies = [gpupolicy(i, [spaces[2 * i % len(spaces)]]) for i in range(args.policies)]
    site = overlays(args.overlays, spaces)
    excepted = exceptions(args.exceptions, spaces)

    # none first: the memory the pack alone holds
    gc.collect()
    rss0 = rss_mib()
    none_store, none_cpu = rule_store([])
    gc.collect()
    rss1 = rss_mib()
    store, load_cpu = rule_store([*policies, *site])
    cache, list_cpu = listed_exceptions(excepted)
    gc.collect()
    rss2 = rss_mib()
    # a full reload in a running server: every object read again from new copies (a re-list), the files
    # parsed again, every exception parsed by a new cache; the CEL programs are kept per process
    _, reload_cpu = rule_store(copy.deepcopy([*policies, *site]))
    _, relist_cpu = listed_exceptions(copy.deepcopy(excepted))
    _, again_cpu = listed_exceptions(copy.deepcopy(excepted), cache)  # the live cache lists again
    assert none_store.ruleset is not None and store.ruleset is not None
    print(
        f"{len(policies)} GPUPolicies, {len(site)} overlays, {len(excepted)} exceptions over {len(spaces)} namespaces; "
        f"rules: {len(none_store.ruleset.rules)} (none) / {len(store.ruleset.rules)} (all)"
    )
    print("\nloads, thread CPU ms (first: in a new process, CEL compiled; reload: programs kept per process)")
    print(f"  pack alone, first                       {none_cpu * 1e3:8.1f}")
    print(f"  pack + policies + overlays, first       {load_cpu * 1e3:8.1f}")
    print(f"  pack + policies + overlays, reload      {reload_cpu * 1e3:8.1f}")
    print(f"  exceptions, first list (all parsed)     {list_cpu * 1e3:8.1f}")
    print(f"  exceptions, a new cache's list          {relist_cpu * 1e3:8.1f}")
    print(f"  exceptions, the live cache lists again  {again_cpu * 1e3:8.1f}")
    full = reload_cpu + relist_cpu
    print(
        f"  full reload (reload + a new cache's list): {full * 1e3:.0f} ms CPU (goal <= 1000){'' if full <= 1.0 else '  FLAG'}"
    )

    added = rss2 - rss1
    print(
        f"\nmemory: RSS {added:+.1f} MiB over none (goal <= +64){'' if added <= 64 else '  FLAG'}; "
        f"the pack alone {rss1 - rss0:+.1f} MiB over the process before it"
    )

    # every namespace in turn: half have a team GPUPolicy (one more rule to run), half only the pack
    groups = {"every namespace": spaces, "with a team policy": spaces[0::2], "without": spaces[1::2]}
    rounds: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        order = (("none", none_store, None), ("all", store, cache))
        for name, rules, found in order if round_ % 2 == 0 else order[::-1]:
            assert rules.ruleset is not None
            for group, where in groups.items():
                samples = request_samples(rules.ruleset, found, where, args.iterations)
                rounds.setdefault((name, group), []).append(statistics.median(samples))
    print(f"\nper GPU pod create (/mutate + /validate), thread CPU p50, {args.rounds} rounds (median)")
    for group in groups:
        none_p50, all_p50 = statistics.median(rounds["none", group]), statistics.median(rounds["all", group])
        ratio = all_p50 / none_p50
        flag = "" if ratio <= 1.1 or group != "every namespace" else "  FLAG"
        print(f"  {group:<20} none {none_p50:7.1f} µs, all {all_p50:7.1f} µs: {ratio:.3f}x (goal <= 1.1){flag}")

    timed = changes(store, cache, policies, site, spaces, args.changes, args.interval)
    print(f"\none change, wall ms from the watch event to the rules serving it (reload poll {args.interval} s)")
    for kind, values in timed.items():
        worst = max(values)
        flag = "" if worst <= 100 or kind == "reload CPU" else "  FLAG"
        label = "  (thread CPU of each load)" if kind == "reload CPU" else ""
        print(f"  {kind:<20} p50 {statistics.median(values):7.1f}  max {worst:7.1f}{flag}{label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
