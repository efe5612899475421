"""The `/policies` check in a process of its own, which is killed when a check outlives its deadline.

A Python thread cannot be cancelled: a lint left running after the apiserver gave up keeps a core
busy, and the GIL it holds (CEL compilation, jsonschema) slows every admission request beside it. A
child process can be killed. It is forked from the server on first use and again after a kill, so it
starts with the server's compiled CEL programs in memory (a check then compiles only what changed,
as in the server) and pays no import or compile time; it runs at a lower CPU priority than the
server, so admission requests win the cores. One check at a time: the caller queues (admission.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger("gpu_webhook.policies")
NICENESS = 5  # below the server's admission work (about a third of its CPU share when both are busy)


class CheckTimeout(Exception):
    """The check did not finish in time; its process was killed and its result will never be read."""


class CheckFailed(Exception):
    """The check raised (its text), or its process died while checking."""


def _serve(connection: Connection, servers_end: Connection) -> None:
    """In the child: run each call sent and send back (True, result) or (False, the error's text)."""
    # The fork copied the server's end of the pipe too. Closed here, the child reads the end of file
    # once the server is gone however it went (SIGKILL, a crash), and exits instead of waiting forever.
    servers_end.close()
    # The fork copied the server's signal handlers, which write to the event loop's wake-up socket
    # shared with the server: the child takes no part in the server's shutdown (offload.py does the same).
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):  # the server closed its end, or is gone
            return
        try:
            answer: tuple[bool, Any] = (True, function(*args))
        except Exception as error:  # the caller refuses the policy with this text (fail closed)
            answer = (False, f"{type(error).__name__}: {error}")
        connection.send(answer)


class Checker:
    """One child process that runs checks, one at a time (the caller's queue serializes them)."""

    def __init__(self) -> None:
        self._process: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None
        self.started = 0  # child processes forked (tests, metrics)
        self.killed = 0  # checks abandoned at their deadline

    def _child(self) -> Connection:
        if self._process is None or not self._process.is_alive() or self._connection is None:
            self.close()
            context = multiprocessing.get_context("fork")  # the server's compiled programs, in milliseconds
            ours, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs, ours), name="gpu-webhook-policy-check", daemon=True)
            process.start()
            theirs.close()
            self._process, self._connection = process, ours
            self.started += 1
        return self._connection

    async def run(self, function: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
        """`function(*args)` in the child within `timeout` seconds (CheckTimeout: killed), else CheckFailed."""
        connection = self._child()
        loop = asyncio.get_running_loop()
        answered = asyncio.Event()
        try:
            connection.send((function, args))
        except (BrokenPipeError, OSError) as error:
            self.close()
            raise CheckFailed(f"the check process is gone ({error})") from None
        descriptor = connection.fileno()
        loop.add_reader(descriptor, answered.set)
        try:
            await asyncio.wait_for(answered.wait(), timeout)
        except TimeoutError:
            self.killed += 1
            log.warning("policy check abandoned after %.1f s; its process killed", timeout)
            loop.remove_reader(descriptor)  # before the close: the next pipe may get the same number
            self.close()
            raise CheckTimeout(f"the check did not finish within {timeout:g} s") from None
        except BaseException:  # cancelled (the server stops): the child may still be checking
            loop.remove_reader(descriptor)
            self.close()
            raise
        loop.remove_reader(descriptor)
        try:
            ok, value = connection.recv()
        except (EOFError, OSError):  # it died while checking (killed for memory, a crash)
            self.close()
            raise CheckFailed("the check process died while checking") from None
        if not ok:
            raise CheckFailed(str(value))
        return value

    def close(self) -> None:
        """Kill the child (a check in progress is abandoned) and forget it; the next run forks a new one."""
        process, connection = self._process, self._connection
        self._process = self._connection = None
        if connection is not None:
            connection.close()
        if process is not None and process.is_alive():
            process.kill()
            process.join(1.0)
