"""`serve --workers N`: N forked copies of the server on one port (SO_REUSEPORT), one supervisor.

Python evaluates one request at a time per process, so a second core needs a second
process. The kernel spreads new connections over the workers' listening sockets; each
worker is a complete server (own rule set, reload watcher, metrics registry). The parent
only supervises: it restarts a worker that dies unexpectedly (a bounded number of
times), forwards SIGTERM/SIGINT so every worker drains its in-flight requests, and exits
when all have finished. A worker that fails at start-up with a configuration error
(exit 2) stops the whole group: restarting it would fail the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable

log = logging.getLogger("gpu_webhook.workers")
EXIT_USAGE = 2
MAX_RESTARTS = 10  # in the supervisor's lifetime; past this something is wrong with every worker
RESTART_DELAY = 0.5  # seconds: a crash loop must not spin the CPU
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _drain_when_orphaned(parent: int) -> None:
    """Get SIGTERM (drain, then exit) when the supervisor dies, even by SIGKILL (Linux).

    Without this, killed supervisors leave workers serving on the port with nobody to stop them.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the supervisor's SIGTERM forwarding is all there is
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def run_workers(count: int, target: Callable[[int], int]) -> int:
    """Fork `count` workers running `target(index)`; return once all have exited (worst exit code)."""
    children: dict[int, int] = {}  # pid -> worker index
    stopping = False

    def stop_all(signum: int = signal.SIGTERM) -> None:
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.kill(pid, signum)

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        stop_all(signal.SIGTERM)  # SIGINT too: workers drain the same way on either

    def spawn(index: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            # The worker installs its own handlers in its event loop; until then the default applies.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _drain_when_orphaned(parent)
            code = 1
            try:
                code = target(index)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = index

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for index in range(count):
        spawn(index)
    log.info("workers started", extra={"workers": count, "pids": sorted(children)})
    worst, restarts = 0, 0
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid not in children:
            continue
        index = children.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        if stopping:
            worst = max(worst, code)  # a signal death (negative) before the loop started is not a failure
            continue
        if code == EXIT_USAGE:
            log.error("worker failed to start; stopping all", extra={"worker": index, "pid": pid})
            stopping = True
            stop_all()
            worst = EXIT_USAGE
            continue
        restarts += 1
        if restarts > MAX_RESTARTS:
            log.error("workers keep dying; giving up", extra={"restarts": restarts})
            stopping = True
            stop_all()
            worst = max(worst, 1)
            continue
        log.error("worker exited unexpectedly; restarting", extra={"worker": index, "pid": pid, "code": code})
        time.sleep(RESTART_DELAY)
        if not stopping:
            spawn(index)
    return worst
