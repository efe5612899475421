"""The GPUPolicyException cache: each watch event parses the one object it carries, off the event loop, and
swaps in its namespace's tuple whole; past the per-namespace bound the newest are not applied (issue 34).

The events are fed to the cache's own watch-thread entry (`_apply`, what `WatchCache._watch` calls per
line of the stream); the list and the watch against a real apiserver: tests/e2e/test_bounded_policy_objects.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client

import webhook.kube.caches as caches_module
from webhook.kube.caches import MAX_EXCEPTIONS_PER_NAMESPACE, ExceptionCache


def exception(name: str, namespace: str = "team-a", version: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(version),
            "creationTimestamp": f"2026-12-01T10:{version // 60:02d}:{version % 60:02d}Z",
        },
        "spec": {"rules": ["gpu-container-resources"], "reason": "e2e", **spec},
    }


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every parse the cache makes (namespace, name), the real parser still doing the work."""
    made: list[tuple[str, str]] = []
    real = caches_module.parse_exception

    def counted(obj: Any, origin: str | None = None) -> Any:
        made.append((obj["metadata"]["namespace"], obj["metadata"]["name"]))
        return real(obj, origin)

    monkeypatch.setattr(caches_module, "parse_exception", counted)
    return made


def cache(**options: Any) -> ExceptionCache:
    return ExceptionCache(client.ApiClient(client.Configuration()), **options)


def test_one_change_parses_one_object_and_swaps_its_namespace_whole(parses: list[tuple[str, str]]) -> None:
    exceptions = cache()
    for i in range(50):
        exceptions._apply(event("ADDED", exception(f"e{i:02d}", "team-a" if i % 2 else "team-b", version=i + 1)))
    assert len(parses) == 50
    team_a, team_b = exceptions.of("team-a"), exceptions.of("team-b")
    assert len(team_a) == len(team_b) == 25
    parses.clear()

    changed = exception("e01", "team-a", version=100, match={"names": ["trainer"]})
    exceptions._apply(event("MODIFIED", changed))
    assert parses == [("team-a", "e01")]  # not the other 49
    assert exceptions.of("team-b") is team_b  # the other namespace's tuple untouched
    assert exceptions.of("team-a") is not team_a  # a new tuple, never one changed in place
    assert next(e for e in exceptions.of("team-a") if e.name == "e01").names == frozenset({"trainer"})
    assert len(team_a) == 25  # a reader holding the old tuple still sees a whole one

    exceptions._apply(event("DELETED", changed))
    assert parses == [("team-a", "e01")]  # deleting parses nothing
    assert len(exceptions.of("team-a")) == 24
    exceptions._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "101"}}})
    assert len(parses) == 1


def test_an_invalid_exception_is_not_applied_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    reported: list[dict[str, int]] = []
    exceptions = cache(on_not_applied=reported.append)
    exceptions._apply(event("ADDED", exception("good", version=1)))
    broken = exception("broken", version=2)
    broken["spec"]["rules"] = []  # minItems 1: it reached the cluster while the /policies check was down
    exceptions._apply(event("ADDED", broken))
    assert [e.name for e in exceptions.of("team-a")] == ["good"]
    assert exceptions.count("team-a") == 2  # stored: what the /policies check counts
    assert reported[-1] == {"invalid": 1, "over_limit": 0}
    assert "GPUPolicyException team-a/broken ignored" in caplog.text


def test_past_the_bound_the_newest_are_not_applied_on_every_replica_alike() -> None:
    reported: list[dict[str, int]] = []
    exceptions = cache(per_namespace=3, on_not_applied=reported.append)
    # created in the order 1..5, delivered in another order (a list after a restart is sorted by name)
    for version in (5, 2, 4, 1, 3):
        exceptions._apply(event("ADDED", exception(f"z{6 - version}", version=version)))
    applied = sorted(e.name for e in exceptions.of("team-a"))
    assert applied == ["z3", "z4", "z5"]  # the three oldest: created at versions 3, 2, 1
    assert exceptions.over_limit("team-a") == ("z2", "z1")
    assert reported[-1] == {"invalid": 0, "over_limit": 2}
    # one of the applied ones goes: the oldest of the rest takes its place
    exceptions._apply(event("DELETED", exception("z5", version=1)))
    assert sorted(e.name for e in exceptions.of("team-a")) == ["z2", "z3", "z4"]
    assert reported[-1] == {"invalid": 0, "over_limit": 1}
    assert MAX_EXCEPTIONS_PER_NAMESPACE == 64  # the documented default (docs/day-two.md)


def test_the_request_path_reads_while_the_watch_thread_changes_it() -> None:
    """`of` is a dict read: a reader never sees a half-built namespace while events arrive on another thread."""
    exceptions = cache(per_namespace=1_000)
    sizes: set[int] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            found = exceptions.of("team-a")
            sizes.add(len(found))
            assert all(e.namespace == "team-a" for e in found)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(300):
            exceptions._apply(event("ADDED", exception(f"e{i:03d}", version=i + 1)))
    finally:
        stop.set()
        reader.join(5)
    assert len(exceptions.of("team-a")) == 300
    assert max(sizes) <= 300
