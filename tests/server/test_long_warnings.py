"""Warnings over real HTTPS: each kept whole (DESIGN section 6: kubectl prints a long warning whole), cut
only when a response's warnings pass 4,096 characters in all (past that the apiserver would cut every
one of them to 256 characters)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import LiveServer, cpu_pod, make_review

# rule long-warning-N warns with the value of the pod's annotation warn-N (one warning per rule)
WARN = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: long-warning-%(n)d}
spec:
  action: Warn
  autogen: false
  match: {kinds: [Pod], operations: [CREATE]}
  validate:
    expression: >-
      has(object.metadata.annotations) && 'warn-%(n)d' in object.metadata.annotations
        ? [object.metadata.annotations['warn-%(n)d']] : []
"""
RULES = 6


@pytest.fixture
def rules_dir(rules_dir: Path) -> Path:
    (rules_dir / "long-warnings.yaml").write_text("---".join(WARN % {"n": n} for n in range(RULES)))
    return rules_dir


def pod(*texts: str) -> dict:
    found = cpu_pod()
    found["metadata"]["annotations"] = {f"warn-{n}": text for n, text in enumerate(texts)}
    return found


async def warnings(live_server: LiveServer, *texts: str) -> list[str]:
    answer = (await live_server.review("validate", make_review(pod(*texts))))["response"]
    assert answer["allowed"] is True
    return [w for w in answer.get("warnings", []) if w.startswith("[long-warning-")]


async def test_a_long_warning_is_kept_whole(live_server: LiveServer) -> None:
    text = "models take " + "a long time to load " * 15 + "end"
    assert await warnings(live_server, text) == [f"[long-warning-0] {text}"]


async def test_past_4096_characters_in_all_the_rest_is_dropped_the_kept_ones_whole(live_server: LiveServer) -> None:
    texts = [f"{i:02d} " + "x" * 997 for i in range(6)]  # 6 of ~1,016 characters each
    got = await warnings(live_server, *texts)
    assert got == [f"[long-warning-{n}] {t}" for n, t in enumerate(texts[:4])]  # the fifth would pass 4,096
    assert sum(map(len, got)) <= 4096


async def test_one_warning_longer_than_4096_is_cut_there_not_at_120(live_server: LiveServer) -> None:
    (got,) = await warnings(live_server, "y" * 5000)
    assert len(got) == 4096 and got.endswith("…") and got.startswith("[long-warning-0] yyy")
