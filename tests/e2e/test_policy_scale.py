"""Policy objects incrementally, through a real kube-apiserver's watch (issue 39, bench/policy_scale.py at
scale): a changed GPUPolicy is served at its watch event, not at the reload poll, and its load does not
parse the rule files again; a changed GPUPolicyException is the only one parsed, and a list again parses
none of the others.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import webhook.kube.caches as caches_module
from tests.e2e.test_policy_objects import GROUP_VERSION, crds, path_of, wait_for  # noqa: F401 (crds: a fixture)
from tests.support import RULES
from tests.support.envtest import EnvTest
from webhook.kube.caches import ExceptionCache
from webhook.kube.policies import PolicyCaches
from webhook.server.metrics import Metrics
from webhook.server.reload import RuleStore, watch

NAMESPACES = ("e2e-scale-a", "e2e-scale-b", "e2e-scale-c")
POLL = 120.0  # the reload watcher's interval: far beyond the test, so only the watch event can wake it


@pytest.fixture(scope="module", autouse=True)
def namespaces(apiserver: EnvTest, crds: list[str]) -> Iterator[None]:  # noqa: F811 (the fixture)
    for name in NAMESPACES:
        apiserver.create_namespace(name)
    yield
    for index in range(4):
        apiserver.request("DELETE", path_of("gpupolicies", f"e2e-scale-{index}"))
    for index in range(6):
        apiserver.request("DELETE", path_of("gpupolicyexceptions", f"e2e-scale-{index}", NAMESPACES[index % 3]))


def team_policy(index: int) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicy",
        "metadata": {"name": f"e2e-scale-{index}"},
        "spec": {
            "action": "Warn",
            "match": {"kinds": ["Pod"], "namespaces": {"include": [NAMESPACES[index % 3]]}},
            "validate": {
                "expression": f"containers.all(c, !c.image.startsWith('blocked-{index}.example.com/'))",
                "message": f"team policy {index}",
            },
        },
    }


def team_exception(index: int, reason: str = "e2e") -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyException",
        "metadata": {"name": f"e2e-scale-{index}", "namespace": NAMESPACES[index % 3]},
        "spec": {"rules": ["gpu-cost-labels"], "match": {"names": [f"batch-{index}"]}, "reason": reason},
    }


def replace(apiserver: EnvTest, plural: str, body: dict[str, Any], namespace: str = "") -> dict[str, Any]:
    path = path_of(plural, body["metadata"]["name"], namespace)
    stored = apiserver.request("GET", path).body
    answer = apiserver.request("PUT", path, {**body, "metadata": {**body["metadata"], **stored["metadata"]}})
    assert answer.ok, f"{answer.status} {answer.message}"
    return dict(answer.body)


class Watcher:
    """The server's reload watcher (`reload.watch`) on an event loop of its own thread."""

    def __init__(self, store: RuleStore) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.task = asyncio.run_coroutine_threadsafe(self._watch(store), self.loop)

    @staticmethod
    async def _watch(store: RuleStore) -> None:
        await watch(store, None, POLL)

    def stop(self) -> None:
        self.task.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_a_changed_gpupolicy_is_served_at_its_watch_event_and_the_rule_files_are_not_parsed_again(
    apiserver: EnvTest,
) -> None:
    made = [apiserver.create(team_policy(index)) for index in range(4)]
    assert all(answer.ok for answer in made), [answer.message for answer in made]
    with apiserver.api_client() as api:
        caches = PolicyCaches(api)
        caches.start()
        watcher = None
        try:
            assert caches.wait_synced(10)
            wait_for("the four policies in the cache", lambda: len(caches.policies) >= 4)
            store = RuleStore(paths=[str(RULES)], metrics=Metrics(), cluster=caches)
            assert store.load() and store.file_reads == 1
            watcher = Watcher(store)
            changed = team_policy(1)
            changed["spec"]["validate"]["message"] = "team policy 1, revised"
            generation = replace(apiserver, "gpupolicies", changed)["metadata"]["generation"]
            began = time.monotonic()
            key = ("GPUPolicy", "", "e2e-scale-1")
            wait_for("the new generation serves", lambda: store.running.get(key) == generation, timeout=20)
            assert time.monotonic() - began < POLL / 4  # the event woke the watcher, not its poll
            assert store.ruleset is not None
            rule = next(r for r in store.ruleset.rules if r.name == "e2e-scale-1")
            assert rule.validate is not None and rule.validate.message == "team policy 1, revised"
            assert store.file_reads == 1  # the pack's files were not read again for an object's change
        finally:
            if watcher is not None:
                watcher.stop()
            caches.stop()


def test_one_changed_exception_is_the_only_one_parsed_and_a_list_again_parses_none(
    apiserver: EnvTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = caches_module.parse_exception

    def counted(obj: Any, origin: str | None = None) -> Any:
        parsed.append(obj["metadata"]["name"])
        return real(obj, origin)

    monkeypatch.setattr(caches_module, "parse_exception", counted)
    for index in range(6):
        made = apiserver.create(team_exception(index))
        assert made.ok, made.message
    with apiserver.api_client() as api:
        cache = ExceptionCache(api)
        cache.start()
        try:
            assert cache.wait_synced(10)
            wait_for("six exceptions applied", lambda: sum(len(cache.of(ns)) for ns in NAMESPACES) == 6)
            untouched = cache.of(NAMESPACES[0])
            parsed.clear()
            replace(apiserver, "gpupolicyexceptions", team_exception(4, "revised"), NAMESPACES[1])
            wait_for("the change applied", lambda: any(e.reason == "revised" for e in cache.of(NAMESPACES[1])))
            assert parsed == ["e2e-scale-4"]  # not the other five
            assert cache.of(NAMESPACES[0]) is untouched
            cache.list_once()  # what a 410 Gone or a broken watch makes the cache do
            assert parsed == ["e2e-scale-4"]  # every object listed at a version already parsed
            assert sum(len(cache.of(ns)) for ns in NAMESPACES) == 6
        finally:
            cache.stop()
