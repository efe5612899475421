"""One endpoint's way from an AdmissionReview body to its answer, on the event loop.

`Pipeline` is what the transport (app.py) calls for each body: it checks that rules are loaded,
sends a large body to the evaluation process (offload.py) and runs the admission sequence
(sequence.py) on a small one here, awaiting the request's context from the watch caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from webhook.engine import Limits, Mode, Phase
from webhook.review import ParsedReview
from webhook.server.context import NamespaceSource, request_snapshot
from webhook.server.offload import Offload
from webhook.server.sequence import DecideConfig, Decided, Problem, first_step, last_step, sequence

if TYPE_CHECKING:
    from webhook.server.reload import RuleStore


@dataclass
class Pipeline:
    """One endpoint's way from a body to its answer: the rules in use, the cluster context, where large bodies go."""

    phase: Phase
    endpoint: str
    rules: RuleStore
    mode: Mode
    limits: Limits
    offload_threshold: int  # bodies larger than this are decided in the evaluation process
    offload: Offload
    context: NamespaceSource | None = None  # the server's cluster, or None without one

    async def __call__(self, body: bytes) -> Decided | Problem:
        ruleset = self.rules.ruleset
        if ruleset is None:
            return Problem(503, "no rule set loaded yet")
        config = DecideConfig(self.phase, self.mode, self.limits)
        if len(body) > self.offload_threshold:
            result = await self.offload.decide(
                ruleset, self.rules.generation, config, body, self.endpoint, self.context
            )
            result.offloaded = True
            return result
        steps = sequence(ruleset, config, body, self.endpoint)  # the fast path: no hop for a small object
        review = first_step(steps)
        if not isinstance(review, ParsedReview):
            return review
        return last_step(steps, await request_snapshot(self.context, review))
