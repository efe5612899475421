"""The one admission sequence (webhook/server/sequence.py): the event loop and the evaluation process
run it alike, so a body gets the same answer's bytes whichever decides it, the namespace context
included; and the input it builds is frozen."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import yaml

from tests.support import EXAMPLES, RULES, StaticNamespaces, make_review
from webhook.engine import AdmissionInput, Limits, Mode, Phase, load_rules
from webhook.review import parse_review
from webhook.server.context import Snapshot
from webhook.server.metrics import Metrics
from webhook.server.offload import Offload
from webhook.server.pipeline import Pipeline
from webhook.server.reload import RuleStore
from webhook.server.sequence import DecideConfig, Decided, Problem, decide, first_step, sequence

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TEAM_A = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "annotations": {"gpu-webhook.io/queue": "team-a-gpu"}},
}


@pytest.fixture
def offload() -> Iterator[Offload]:
    pool = Offload()
    yield pool
    pool.shutdown()


def gpu_job_review() -> bytes:
    job = next(d for d in yaml.safe_load_all((EXAMPLES / "job-finetune.yaml").read_text()) if d and d["kind"] == "Job")
    job["metadata"]["namespace"] = "team-a"
    return orjson.dumps(make_review(job, namespace="team-a"))


def pipeline(offload: Offload, threshold: int, namespaces: Any) -> Pipeline:
    store = RuleStore(paths=[str(RULES)], metrics=Metrics())
    assert store.load(), store.errors
    return Pipeline(Phase.MUTATE, "mutate", store, Mode.ENFORCE, Limits(), threshold, offload, namespaces)


async def test_the_loop_and_the_evaluation_process_give_the_same_bytes(offload: Offload) -> None:
    body = gpu_job_review()
    namespaces = StaticNamespaces({"team-a": TEAM_A})
    on_loop = await pipeline(offload, len(body) + 1, namespaces)(body)
    in_child = await pipeline(offload, 0, namespaces)(body)
    assert isinstance(on_loop, Decided) and isinstance(in_child, Decided)
    assert (on_loop.offloaded, in_child.offloaded) == (False, True)
    assert in_child.answer == on_loop.answer
    # the namespace's queue reached the child too (it asked for the namespace's Snapshot)
    assert QUEUE_LABEL.replace("/", "~1").encode() in _patch(on_loop.answer)


async def test_a_malformed_body_is_the_same_problem_on_both_paths(offload: Offload) -> None:
    body = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}'
    on_loop = await pipeline(offload, len(body) + 1, None)(body)
    in_child = await pipeline(offload, 0, None)(body)
    assert isinstance(on_loop, Problem) and isinstance(in_child, Problem)
    assert on_loop.status == 400 and (on_loop.status, on_loop.message) == (in_child.status, in_child.message)


def test_the_sequence_asks_for_the_context_of_the_parsed_review_once() -> None:
    ruleset = load_rules([str(RULES)]).require()
    config = DecideConfig(Phase.MUTATE, Mode.ENFORCE, Limits())
    body = gpu_job_review()
    asked: list[str | None] = []

    def context(review: Any) -> Snapshot:
        asked.append(review.namespace)
        return Snapshot("team-a", TEAM_A)

    decided = decide(ruleset, config, body, "mutate", context)
    assert isinstance(decided, Decided) and asked == ["team-a"]
    assert isinstance(first_step(sequence(ruleset, config, b"[]", "mutate")), Problem)  # no question asked


def test_the_input_is_built_whole_and_frozen() -> None:
    review = parse_review(gpu_job_review())
    admission = review.to_input(TEAM_A, json_commas=7)
    assert (admission.namespace_object, admission.json_commas, admission.kind) == (TEAM_A, 7, "Job")
    with pytest.raises(dataclasses.FrozenInstanceError):
        admission.json_commas = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        AdmissionInput(object={}).priority_classes = {}  # type: ignore[misc]


def _patch(answer: bytes) -> bytes:
    return base64.b64decode(orjson.loads(answer)["response"]["patch"])
