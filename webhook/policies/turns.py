"""Whose turn it is to be checked: one check at a time, the waiting ones in bounded lanes.

Lanes are served in order: the platform team's cluster-scoped kinds (GPUPolicy, GPUPolicyOverlay) before
the GPUPolicyExceptions that namespace approvers write, so a flood of exceptions delays an admin's apply
by one check at most, never by a queue of them. Each lane bounds how many may wait, and within a lane one
key (a namespace) may hold only part of it, so one namespace cannot take every place from the others.
A waiter that gives up (its deadline) leaves the lane; the slot is handed from check to check, never
released to a race.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Turns:
    def __init__(self, lanes: dict[str, int], per_key: int) -> None:
        """`lanes`: lane -> places to wait, in the order they are served; `per_key`: places one key may hold."""
        self._places = dict(lanes)
        self._per_key = per_key
        self._waiting: dict[str, deque[tuple[str, asyncio.Future[None]]]] = {lane: deque() for lane in lanes}
        self._busy = False

    def waiting(self, lane: str, key: str | None = None) -> int:
        return sum(1 for k, f in self._waiting[lane] if not f.done() and (key is None or k == key))

    def refused(self, lane: str, key: str) -> str:
        """Why a new check of `key` in `lane` may not wait ('' if it may)."""
        if not self._busy:
            return ""
        if self.waiting(lane) >= self._places[lane]:
            return f"{self.waiting(lane)} waiting"
        if self.waiting(lane, key) >= self._per_key:
            return f"{self.waiting(lane, key)} of {key} waiting"
        return ""

    async def take(self, lane: str, key: str, timeout: float) -> None:
        """Wait for the slot (TimeoutError after `timeout` seconds); `give()` it back when done."""
        if not self._busy:
            self._busy = True
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[lane].append((key, turn))
        try:
            await asyncio.wait_for(turn, max(timeout, 0.0))  # a turn handed over meanwhile is still returned
        finally:
            if not turn.done() or turn.cancelled():
                self._forget(lane, turn)

    def give(self) -> None:
        """Hand the slot to the first waiter of the first lane that has one, else free it."""
        for lane in self._waiting.values():
            while lane:
                _, turn = lane.popleft()
                if not turn.done():
                    turn.set_result(None)
                    return
        self._busy = False

    def _forget(self, lane: str, turn: asyncio.Future[None]) -> None:
        self._waiting[lane] = deque((k, f) for k, f in self._waiting[lane] if f is not turn)
