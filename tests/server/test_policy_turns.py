"""Whose turn it is among waiting /policies checks (webhook/policies/turns.py): the platform's lane first,
each lane bounded, one namespace holding part of its lane, a waiter that gives up leaving no hole."""

from __future__ import annotations

import asyncio

import pytest

from webhook.policies.turns import Turns


async def test_the_platform_lane_goes_first_and_one_key_cannot_take_every_place() -> None:
    turns = Turns({"platform": 4, "namespaces": 4}, per_key=2)
    order: list[str] = []
    release = asyncio.Event()

    async def check(lane: str, key: str, name: str) -> None:
        await turns.take(lane, key, 5.0)
        order.append(name)
        if name == "running":
            await release.wait()
        turns.give()

    running = asyncio.ensure_future(check("namespaces", "team-a", "running"))
    await asyncio.sleep(0)
    waiting = [asyncio.ensure_future(check("namespaces", "team-a", f"a{i}")) for i in range(2)]
    await asyncio.sleep(0)
    assert turns.refused("namespaces", "team-a") == "2 of team-a waiting"
    assert turns.refused("namespaces", "team-b") == ""
    waiting.append(asyncio.ensure_future(check("namespaces", "team-b", "b0")))
    waiting.append(asyncio.ensure_future(check("platform", "", "policy")))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(running, *waiting)
    assert order == ["running", "policy", "a0", "a1", "b0"]
    assert turns.refused("namespaces", "team-a") == ""  # idle: anyone may start


async def test_a_full_lane_is_refused_and_a_waiter_that_gives_up_leaves_the_slot_whole() -> None:
    turns = Turns({"platform": 1, "namespaces": 1}, per_key=1)
    await turns.take("platform", "", 1.0)  # running
    waiter = asyncio.ensure_future(turns.take("platform", "", 0.05))
    await asyncio.sleep(0)
    assert turns.refused("platform", "") == "1 waiting"
    with pytest.raises(TimeoutError):
        await waiter
    assert turns.refused("platform", "") == ""  # its place is free again
    turns.give()  # the running check ends: nobody waits, the slot is free
    await asyncio.wait_for(turns.take("platform", "", 0.0), 1.0)  # taken at once
    turns.give()
