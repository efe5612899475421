"""Large admission requests are decided in a child process, so they cannot stall small ones.

A 2.9 MiB pod (240 containers x ~800 env entries) takes ~0.5 s of CPU to parse and evaluate.
On the event loop that is 0.5 s of latency for every request behind it; on a thread it is
not much better, because the CEL runtime (cel-expr-python) and orjson hold the GIL for up to
~130 ms per call (measured: a thread evaluating that pod left the loop without the GIL for
133 ms at a time, and 8 senders pushed a small request's p99 to 2 s). A child process has a
GIL of its own.

The child is forked from the server once per rule-set generation, so it inherits the rule
set as it is in memory (nothing is pickled or reloaded; a reload that failed in the server
is not retried in the child). It gets the raw body and runs the one admission sequence on it
(webhook.server.sequence), as the event loop does, and returns the answer's bytes, its labels for
the metrics and the rules to count. With a namespace watch, the child asks for the context it needs by
namespace name and is sent it (webhook.server.context.Snapshot: the Namespace, PriorityClasses,
the namespace's DRA claims) in a second call, so the server never parses a large body. The
request's phase and limits travel with each call: one child serves both endpoints.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import os
import signal
import threading
import time

from webhook.engine import RuleSet
from webhook.review import ParsedReview
from webhook.server.context import UNKNOWN, NamespaceSource, Snapshot, snapshot
from webhook.server.memory import trim
from webhook.server.sequence import DecideConfig, Decided, Problem, decide

log = logging.getLogger("gpu_webhook.offload")


_RULESET: RuleSet | None = None  # set only inside the child process, by _start_child


def _start_child(ruleset: RuleSet) -> None:
    global _RULESET
    _RULESET = ruleset
    # The fork copied the server's signal set-up, whose handlers write to the event loop's
    # wake-up socket, shared with the server: a signal sent to the child would make the
    # server believe it got it. The child takes no part in shutdown; it exits when the server
    # closes its pool, or when the server is gone.
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(os.getppid(),), name="exit-with-server", daemon=True).start()


def _exit_with(server: int, every: float = 1.0) -> None:
    """In the child: exit once the server is gone. A server that dies without closing its pool
    (SIGKILL, the OOM killer) would leave the worker waiting forever on the pool's queue, whose
    pipe the fork left open in the worker itself (measured: still there after the server died)."""
    while os.getppid() == server:
        time.sleep(every)
    os._exit(0)


class NeedNamespace(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _decide_in_child(
    body: bytes, endpoint: str, config: DecideConfig, lookup: bool, context: Snapshot | None
) -> Decided | Problem | str:
    """In the child: the decision, or the name of the namespace whose context it needs first.

    `config` comes with each request: one child serves both endpoints (mutate and validate).
    """
    ruleset = _RULESET
    assert ruleset is not None

    def sent(review: ParsedReview) -> Snapshot:
        if not lookup or not review.namespace:
            return UNKNOWN
        if context is None or context.namespace != review.namespace:
            raise NeedNamespace(review.namespace)
        return context

    try:
        return decide(ruleset, config, body, endpoint, sent)
    except NeedNamespace as need:
        return need.name
    finally:
        # a 3 MiB pod's parse and CEL values peak at ~130 MiB; glibc keeps freed heap mapped, so the
        # child would hold that peak for good (measured: 147 MiB RSS after, 77 MiB once trimmed)
        trim()


class Offload:
    """One child process per rule-set generation; requests wait in its queue."""

    def __init__(self) -> None:
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._generation = -1

    def _executor(self, ruleset: RuleSet, generation: int) -> concurrent.futures.Executor:
        if self._pool is None or generation != self._generation:
            if self._pool is not None:
                self._pool.shutdown(wait=False)  # its queued requests still finish
            # fork, not spawn: the child starts with the rule set as compiled here, in milliseconds
            self._pool = concurrent.futures.ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_child,
                initargs=(ruleset,),
            )
            self._generation = generation
        return self._pool

    async def decide(
        self,
        ruleset: RuleSet,
        generation: int,
        config: DecideConfig,
        body: bytes,
        endpoint: str,
        namespaces: NamespaceSource | None,
    ) -> Decided | Problem:
        loop = asyncio.get_running_loop()
        context: Snapshot | None = None
        broken = 0
        while True:
            executor = self._executor(ruleset, generation)
            try:
                result = await loop.run_in_executor(
                    executor, _decide_in_child, body, endpoint, config, namespaces is not None, context
                )
            except concurrent.futures.process.BrokenProcessPool:
                # The child died (killed for memory, or by a signal while idle). Once, a new child
                # retries the request; twice, the request itself is likely the cause: refuse it.
                log.error("evaluation process died; starting a new one")
                self._pool = None
                broken += 1
                if broken > 1:
                    return Problem(500, "gpu-webhook's evaluation process died while evaluating this request")
                continue
            if not isinstance(result, str):
                return result
            if context is not None:
                return Problem(500, "gpu-webhook could not resolve the request's namespace")
            assert namespaces is not None  # the child asks for a namespace only when it may (lookup)
            context = await snapshot(namespaces, result)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
