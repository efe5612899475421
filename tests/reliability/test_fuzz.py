"""Malformed and hostile input, short form: a few hundred bodies and every kind of bad client.

The long form is `python -m bench.fuzz` (10,000+ cases). Acceptable answers: a 4xx, or a
well-formed AdmissionReview response; never a 5xx, a traceback, a hang or a stuck worker.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from tests.support import LiveServer, client_ssl, cpu_pod, make_review
from tests.support.hostile import ABUSES, abuse, abuse_verdict, cases, send_cases
from webhook.engine import AdmissionInput, Limits, Phase, evaluate, load_rules

CI_CASES = 500


async def wait_idle(live: LiveServer, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while live.server.state.in_flight:
        assert time.monotonic() < deadline, f"{live.server.state.in_flight} requests still in flight"
        await asyncio.sleep(0.05)


async def test_hostile_bodies_get_4xx_or_a_proper_answer(live_server: LiveServer, cert_dir: Path) -> None:
    counts, failures = await send_cases(live_server.base, client_ssl(cert_dir), cases(CI_CASES, seed=8))
    assert not failures, "\n".join(failures[:20])
    assert sum(counts.values()) == CI_CASES
    await wait_idle(live_server)
    assert (await live_server.review("mutate", make_review(cpu_pod())))["response"]["allowed"] is True


@pytest.mark.parametrize("kind", ABUSES)
async def test_misbehaving_clients_never_get_5xx_or_hold_a_worker(
    live_server: LiveServer, cert_dir: Path, kind: str
) -> None:
    live_server.server.state.config.body_timeout = 0.3
    rng = random.Random(kind)
    outcomes = await asyncio.gather(
        *(abuse("127.0.0.1", live_server.server.port, client_ssl(cert_dir), kind, rng) for _ in range(4))
    )
    problems = [p for p in (abuse_verdict(kind, o) for o in outcomes) if p]
    assert not problems, outcomes
    # others are served meanwhile and right after; no handler stays stuck on a dead client
    assert (await live_server.review("validate", make_review(cpu_pod())))["response"]["allowed"] is True
    await wait_idle(live_server)


def test_engine_never_raises_on_hostile_objects() -> None:
    """The same mutated objects straight into the engine: a rule error at worst, never an exception."""
    import orjson

    ruleset = load_rules(Path(__file__).resolve().parents[2] / "rules").ruleset
    assert ruleset is not None
    tried = 0
    for case in cases(CI_CASES, seed=9):
        try:
            review = orjson.loads(case.body)
            request = review["request"]
            subject = request.get("object") or request.get("oldObject")
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            continue
        if not isinstance(subject, dict):
            continue
        tried += 1
        admission = AdmissionInput(
            object=subject, operation="CREATE", kind=str(subject.get("kind", "")), namespace="team-a"
        )
        decision = evaluate(ruleset, admission, Phase.ALL, limits=Limits(time_budget=None))
        assert isinstance(decision.allowed, bool)
    assert tried > CI_CASES // 3
