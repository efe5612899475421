"""Faults under load, short form: 10 rule reloads, 2 certificate swaps and a SIGTERM while
requests keep coming lose nothing. The long form is `python -m bench.faults` (100 / 10)."""

from __future__ import annotations

from tests.support.faults import run


async def test_reloads_certificate_swaps_and_sigterm_under_load_lose_no_request() -> None:
    result = await run(reloads=10, cert_swaps=2, concurrency=8, settle=0.2)
    assert result["rule reloads"] == 10 and result["certificate swaps"] == 2
    assert result["requests issued"] > 100
    assert result["failed"] == 0, result["failures"]
    assert result["lost"] == 0
    assert result["server exit code"] == 0
