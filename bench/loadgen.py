"""Load generator: keep-alive HTTPS POSTs of AdmissionReviews to one URL, in its own process.

Two modes, both bounded in count and time:

- `run_open_loop`: requests are scheduled at fixed intended send times (rate per second).
  Latency is measured from the *intended* time, so a stall in the server (or in the
  client) counts against every request that should have been sent meanwhile: no
  coordinated omission. `send_lag_*` reports how late the generator itself started
  requests; if it is large the client, not the server, is the bottleneck.
- `run_closed_loop`: `connections` workers each send the next request as soon as the
  previous answer arrives; reports the throughput.

Each call runs in a freshly spawned process (the caller's event loop and GIL stay out of
the measurement) and returns a plain dict. Loopback only: the URL must be 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp

MAX_REQUESTS = 2_000_000  # hard bound on one run, whatever rate x duration asks for
MAX_DURATION = 600.0


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p90/p99/p99.9/max in milliseconds of latencies given in seconds (nearest rank)."""
    if not samples:
        return {"p50_ms": float("nan"), "p90_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    ordered = sorted(samples)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] * 1e3

    return {
        "p50_ms": rank(0.50),
        "p90_ms": rank(0.90),
        "p99_ms": rank(0.99),
        "p999_ms": rank(0.999),
        "max_ms": ordered[-1] * 1e3,
    }


def _check_url(url: str) -> None:
    if urlsplit(url).hostname not in ("127.0.0.1", "localhost"):
        raise ValueError(f"load is only sent to loopback, not {url}")


def _client_ssl(ca_file: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file)
    context.check_hostname = False  # the dev certificate names localhost; we dial 127.0.0.1
    return context


async def _post(session: aiohttp.ClientSession, url: str, body: bytes) -> bool:
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
        await response.read()
        return response.status == 200


async def _open_loop(
    url: str, ca_file: str, bodies: list[bytes], rate: float, duration: float, connections: int, timeout: float
) -> dict[str, Any]:
    total = min(int(rate * duration), MAX_REQUESTS)
    clock = time.perf_counter  # uvloop's loop.time() has only millisecond resolution
    connector = aiohttp.TCPConnector(ssl=_client_ssl(ca_file), limit=connections)
    latencies: list[float] = []
    lags: list[float] = []
    errors = 0

    async def one(intended: float, body: bytes) -> None:
        nonlocal errors
        lags.append(clock() - intended)
        try:
            ok = await _post(session, url, body)
        except (aiohttp.ClientError, TimeoutError, OSError):
            ok = False
        if ok:
            latencies.append(clock() - intended)
        else:
            errors += 1

    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        # Open the keep-alive connections (TLS handshakes) before the clock starts.
        await asyncio.gather(*(_post(session, url, bodies[i % len(bodies)]) for i in range(connections)))
        tasks: set[asyncio.Task[None]] = set()
        start = clock() + 0.05
        interval = 1.0 / rate
        sent = 0
        while sent < total:
            now = clock()
            due = min(total, int((now - start) / interval) + 1) if now >= start else 0
            while sent < due:  # everything whose intended time has passed goes out now
                task = asyncio.create_task(one(start + sent * interval, bodies[sent % len(bodies)]))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                sent += 1
            if now - start > min(duration, MAX_DURATION) + timeout:
                break
            ahead = start + sent * interval - clock()
            # Timers fire with ~1 ms granularity: sleep only when the next send is well ahead,
            # otherwise just yield to the loop (answers keep being read) and look again.
            await asyncio.sleep(ahead - 0.0015 if ahead > 0.002 else 0)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout + 1)
        elapsed = clock() - start
    return {
        "mode": "open",
        "offered_rps": rate,
        "requests": sent,
        "ok": len(latencies),
        "errors": errors + (sent - len(latencies) - errors),
        "achieved_rps": len(latencies) / elapsed if elapsed > 0 else 0.0,
        **percentiles(latencies),
        "send_lag_p99_ms": percentiles(lags)["p99_ms"],
        "send_lag_max_ms": percentiles(lags)["max_ms"],
    }


async def _closed_loop(
    url: str, ca_file: str, bodies: list[bytes], connections: int, duration: float, timeout: float
) -> dict[str, Any]:
    clock = time.perf_counter
    connector = aiohttp.TCPConnector(ssl=_client_ssl(ca_file), limit=connections)
    latencies: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        await asyncio.gather(*(_post(session, url, bodies[i % len(bodies)]) for i in range(connections)))
        deadline = clock() + min(duration, MAX_DURATION)
        start = clock()

        async def worker(offset: int) -> None:
            nonlocal errors
            i = offset
            while clock() < deadline and len(latencies) < MAX_REQUESTS:
                sent = clock()
                try:
                    ok = await _post(session, url, bodies[i % len(bodies)])
                except (aiohttp.ClientError, TimeoutError, OSError):
                    ok = False
                if ok:
                    latencies.append(clock() - sent)
                else:
                    errors += 1
                i += connections

        await asyncio.gather(*(worker(i) for i in range(connections)))
        elapsed = clock() - start
    return {
        "mode": "closed",
        "connections": connections,
        "ok": len(latencies),
        "errors": errors,
        "achieved_rps": len(latencies) / elapsed if elapsed > 0 else 0.0,
        **percentiles(latencies),
    }


def _run(coroutine_name: str, cpu: int | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})
    try:
        import uvloop  # a faster loop keeps the client from being the bottleneck

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    coroutine = {"open": _open_loop, "closed": _closed_loop}[coroutine_name]
    return runner(coroutine(**kwargs))


def _child(connection: Any, mode: str, cpu: int | None, kwargs: dict[str, Any]) -> None:
    try:
        connection.send(_run(mode, cpu, kwargs))
    except BaseException as error:  # report, never hang the parent
        connection.send({"error": f"{type(error).__name__}: {error}"})
    finally:
        connection.close()


def _in_process(mode: str, cpu: int | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    _check_url(kwargs["url"])
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sender, mode, cpu, kwargs), daemon=True)
    started = time.perf_counter()
    process.start()
    sender.close()
    # bounded: the run's own duration plus its timeout, plus start-up and warm-up slack
    limit = min(kwargs["duration"], MAX_DURATION) + kwargs["timeout"] + 30
    result: dict[str, Any] = receiver.recv() if receiver.poll(limit) else {"error": f"no result within {limit:.0f}s"}
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()
    if "error" in result:
        raise RuntimeError(f"load generator failed: {result['error']}")
    result["wall_s"] = time.perf_counter() - started
    return result


def run_open_loop(
    url: str,
    ca_file: str,
    bodies: list[bytes],
    rate: float,
    duration: float,
    connections: int = 32,
    timeout: float = 5.0,
    cpu: int | None = None,
) -> dict[str, Any]:
    """Offer `rate` requests/s for `duration` s from a separate process; latency stats in ms."""
    kwargs = dict(
        url=url, ca_file=ca_file, bodies=bodies, rate=rate, duration=duration, connections=connections, timeout=timeout
    )
    return _in_process("open", cpu, kwargs)


def run_closed_loop(
    url: str,
    ca_file: str,
    bodies: list[bytes],
    connections: int = 16,
    duration: float = 10.0,
    timeout: float = 5.0,
    cpu: int | None = None,
) -> dict[str, Any]:
    """As many requests as `connections` keep-alive connections can carry for `duration` s."""
    kwargs = dict(url=url, ca_file=ca_file, bodies=bodies, connections=connections, duration=duration, timeout=timeout)
    return _in_process("closed", cpu, kwargs)
