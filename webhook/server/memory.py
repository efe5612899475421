"""Keep the server's memory and garbage-collector pauses in bounds.

The cyclic garbage collector's full pass walks every tracked object; the rule set alone
(compiled CEL, schemas, ~50,000 objects) cost 17-25 ms per pass, and connection churn makes
full passes come every few seconds. What exists once the rule set is loaded lives as long as
it does, so it is frozen out of the collector's passes (gc.freeze) and settled again after
each reload (so the old rule set can still be collected).

Freed heap: glibc keeps memory that Python frees mapped in its arenas, so a burst (3,000 connections'
TLS state, a 3 MiB pod parsed in the evaluation process) would otherwise set the process's
RSS for good, and bursts of different kinds would add up towards the container's limit.
malloc_trim(0) returns what is free; it takes well under a millisecond on a quiet heap.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc

TRIM_INTERVAL = 10.0  # seconds between trims of the server process


def settle() -> None:
    """After start-up or a rule reload: collect once, then keep what is left out of later passes."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def trim() -> None:
    with contextlib.suppress(OSError, AttributeError):  # glibc only; elsewhere nothing to do
        ctypes.CDLL(None).malloc_trim(0)


async def trim_periodically(interval: float = TRIM_INTERVAL) -> None:
    while True:
        await asyncio.sleep(interval)
        trim()
