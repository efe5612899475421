"""Where a server's time goes under load: py-spy samples of one worker while wrk drives it.

Stacks are folded into parts by the frames they contain (first match wins, in the order
below), so the shares add up to 100% of the samples. Needs py-spy (the `bench` extra)
and permission to ptrace a child process; skipped otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (part, substrings of a frame that put a sample in it)
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("engine evaluate", ("evaluate (webhook/engine/evaluate.py",)),
    ("parse (orjson + checks)", ("parse_review (", "admit (bench/noop_server.py")),
    ("serialise", ("build_response (",)),
    ("metrics", ("webhook/server/metrics.py", "prometheus_client")),
    ("logging", ("logging/__init__.py", "_log_decision")),
    ("rest of the handler: body read, Response, bookkeeping", ("webhook/server/",)),
    ("TLS", ("ssl.py", "sslproto.py")),
    ("aiohttp (HTTP parsing, routing, response)", ("aiohttp/",)),
]


def available() -> bool:
    return shutil.which("py-spy") is not None


def count_samples(raw: str, part_of: Callable[[str], str]) -> tuple[Counter[str], int]:
    """Samples per part (`part_of(stack)` names it) and in all, from py-spy's raw (collapsed) output."""
    counts: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack or not number.isdigit():
            continue
        total += int(number)
        counts[part_of(stack)] += int(number)
    return counts, total


def _server_part(stack: str) -> str:
    return next((name for name, marks in PARTS if any(mark in stack for mark in marks)), "event loop and other")


def fold(raw: str) -> dict[str, float]:
    """Shares of samples per part from py-spy's raw (collapsed) output."""
    counts, total = count_samples(raw, _server_part)
    return {part: counts[part] / total for part, _ in [*PARTS, ("event loop and other", ())]} if total else {}


def record(pid: int, seconds: float, rate: int = 250) -> dict[str, float]:
    """Sample process `pid` for `seconds` (bounded) and fold the stacks."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "raw.txt"
        command = ["py-spy", "record", "-p", str(pid), "-d", str(max(1, round(seconds))), "-r", str(rate)]
        command += ["-f", "raw", "-o", str(out), "--nonblocking"]
        subprocess.run(command, capture_output=True, timeout=seconds + 30, check=True)
        return fold(out.read_text())


def profile_under_load(pid: int, drive: Any, seconds: float) -> dict[str, Any]:
    """Run `drive()` (a bounded load run) while sampling `pid`; the samples are taken mid-run."""
    import threading

    result: dict[str, Any] = {}

    def sample() -> None:
        try:
            result["shares"] = record(pid, seconds)
        except (subprocess.SubprocessError, OSError) as error:
            result["error"] = str(error)

    sampler = threading.Timer(1.0, sample)  # let the load settle first
    sampler.start()
    result["load"] = drive()
    sampler.join(seconds + 40)
    return result
