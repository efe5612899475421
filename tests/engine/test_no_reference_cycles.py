"""An evaluation leaves no reference cycles: everything it builds is freed when it returns.

A cycle (a closure holding the run that holds the closure) keeps each request's working copy,
activations and trace alive until the garbage collector runs, and the collector's passes then
cost every request: +13-27% of a /mutate in process when one such closure slipped in.
The server's path and the offline doors' (trace on) are both checked.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import cpu_pod, gpu_pod
from webhook.engine import AdmissionInput, Phase, evaluate

TENANT = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {
        "name": "team-a",
        "uid": "5d1c0b1e-0000-4000-8000-000000000002",
        "resourceVersion": "7",
        "labels": {"gpu-webhook.io/tenant": "true", "team": "a"},
    },
}


@pytest.fixture(scope="module")
def ruleset(pack: Any) -> Any:
    return pack  # the session's compiled pack (tests/conftest.py)


@pytest.fixture(scope="module")
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("trace", [False, True])
@pytest.mark.parametrize("phase", [Phase.MUTATE, Phase.VALIDATE, Phase.ALL])
def test_an_evaluation_leaves_no_cycles(ruleset: Any, collector_off: None, phase: Phase, trace: bool) -> None:
    gc.collect(0)  # pytest's own garbage since the last test: the young generation starts empty
    for pod in (gpu_pod(), cpu_pod()):
        admission = AdmissionInput.offline(pod, namespace="team-a", namespace_object=TENANT)
        decision = evaluate(ruleset, admission, phase=phase, trace=trace)
        assert decision.errors == []
        del decision, admission
    # with the collector off, everything the evaluation built is still in the young generation:
    # collecting that one alone finds any cycle it left, without walking the whole heap
    assert gc.collect(0) == 0
