"""Three tenant attacks on one `gpu-webhook serve` while a legitimate client sends GPU pods.

"No tenant can take the webhook down": the server runs as a subprocess (its command is a
parameter, so the same harness measures another build's server), a legitimate client in a
process of its own sends compliant GPU-pod reviews at 50 req/s for the whole run, and the
attacks come one after the other:

1. metrics: N reviews with a random `request.kind.kind` each, then /metrics is scraped:
   its size and the time it takes.
2. connections: idle TLS connections that handshake and then stay idle, and TCP connections
   that never send a byte (both reconnect when the server closes them), held for a while once
   all are open: the legitimate client's p99 and failures, the server's peak memory (PSS of the
   server and its evaluation process).
3. heavy: senders post 2.9 MiB apiserver-valid pods (240 containers x ~800 env entries) back
   to back: the legitimate client's p99 and max.

`TARGETS` are the figures a run must stay under. `Sizes()` is the long form
(`python -m bench.attacks`), `SHORT` the CI form (tests/reliability/test_attacks.py).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import resource
import shutil
import signal
import ssl
import string
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.support.reviews import MIB, heavy_pod, pod, review
from tests.support.server import client_ssl, free_port
from webhook.certs import generate_bundle, write_bundle

TARGETS = {
    "metrics_bytes": 1_000_000,
    "metrics_seconds": 0.1,
    "idle_p99": 0.1,
    "idle_rss_mib": 384,
    "heavy_p99": 1.0,
    "heavy_max": 5.0,
}


@dataclass
class Sizes:
    random_kinds: int = 20_000
    idle_tls: int = 2_000
    silent_tcp: int = 1_000
    hold_seconds: float = 10.0
    heavy_senders: int = 8
    heavy_seconds: float = 10.0
    legit_rate: float = 50.0


SHORT = Sizes(random_kinds=3_000, idle_tls=600, silent_tcp=300, hold_seconds=3.0, heavy_senders=8, heavy_seconds=4.0)


def random_kind_review(rng: random.Random) -> bytes:
    body = review(pod())
    kind = "".join(rng.choices(string.ascii_letters, k=12))
    for key in ("kind", "requestKind"):
        body["request"][key]["kind"] = kind
    return orjson.dumps(body)


# -- the server ------------------------------------------------------------------------------


class ServerProcess:
    def __init__(self, command: list[str], rules: str, workdir: Path, extra: list[str]) -> None:
        self.port = free_port()
        self.cert_dir = workdir / "certs"
        self.cert_dir.mkdir()
        write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), self.cert_dir)
        self.log = (workdir / "server.log").open("wb")
        args = [*command, "serve", "--port", str(self.port), "--cert-dir", str(self.cert_dir), "--rules", rules]
        self.process = subprocess.Popen([*args, "--loop", "asyncio", *extra], stdout=self.log, stderr=self.log)
        self.base = f"https://localhost:{self.port}"

    def pids(self) -> list[int]:
        found, stack = [], [self.process.pid]
        while stack:
            pid = stack.pop()
            found.append(pid)
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            stack.extend(int(c) for c in children)
        return found

    def rss_mib(self) -> float:
        """Memory of the server and its children: proportional set size (a page shared by a forked
        child is counted once, as the container's memory cgroup counts it), else RSS."""
        total = 0
        for pid in self.pids():
            try:
                text = Path(f"/proc/{pid}/smaps_rollup").read_text()
                key = "Pss:"
            except OSError:
                try:
                    text, key = Path(f"/proc/{pid}/status").read_text(), "VmRSS:"
                except OSError:
                    continue
            for line in text.splitlines():
                if line.startswith(key):
                    total += int(line.split()[1])
                    break
        return total / 1024

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class RssSampler:
    """Samples the server's RSS every 50 ms; peak() over a time window."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append((time.time(), self.server.rss_mib()))

    def peak(self, start: float = 0.0, end: float = float("inf")) -> float:
        return max((rss for t, rss in self.samples if start <= t <= end), default=0.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


async def wait_ready(server: ServerProcess, context: ssl.SSLContext, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RuntimeError(f"server exited with {server.process.returncode}")
            try:
                async with session.get(f"{server.base}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("server never became ready")


# -- the legitimate client (a process of its own) ----------------------------------------------


def legit_client(base: str, ca_dir: str, rate: float, stop: Any, connection: Any) -> None:
    """Compliant GPU-pod reviews at `rate` per second until stop is set: (sent at, seconds, ok) each."""
    samples: list[tuple[float, float, bool]] = []

    async def run() -> None:
        body = orjson.dumps(review(pod()))
        connector = aiohttp.TCPConnector(ssl=client_ssl(Path(ca_dir)), limit=64)
        timeout = aiohttp.ClientTimeout(total=10)  # the apiserver's default webhook timeout
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def one(endpoint: str) -> None:
                sent, started = time.time(), time.perf_counter()
                ok = False
                try:
                    async with session.post(f"{base}/{endpoint}", data=body) as response:
                        answer = await response.read()
                        ok = response.status == 200 and orjson.loads(answer)["response"]["allowed"] is True
                except (aiohttp.ClientError, TimeoutError, KeyError, orjson.JSONDecodeError):
                    ok = False
                samples.append((sent, time.perf_counter() - started, ok))

            tasks = []
            interval, next_at, index = 1 / rate, time.monotonic(), 0
            while not stop.is_set():
                tasks.append(asyncio.create_task(one("validate" if index % 2 else "mutate")))
                index += 1
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await asyncio.gather(*tasks)

    asyncio.run(run())
    connection.send(samples)
    connection.close()


def window(samples: list[tuple[float, float, bool]], start: float, end: float) -> dict[str, Any]:
    inside = [(seconds, ok) for sent, seconds, ok in samples if start <= sent <= end]
    latencies = sorted(seconds for seconds, _ in inside)
    if not latencies:
        return {"requests": 0, "failures": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    return {
        "requests": len(latencies),
        "failures": sum(1 for _, ok in inside if not ok),
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "max": latencies[-1],
    }


# -- the attacks -------------------------------------------------------------------------------


async def random_kinds(base: str, context: ssl.SSLContext, count: int, concurrency: int = 16) -> dict[str, Any]:
    rng = random.Random(12)
    bodies = [random_kind_review(rng) for _ in range(count)]
    statuses: dict[str, int] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=concurrency)) as session:

        async def worker(share: list[bytes]) -> None:
            for body in share:
                try:
                    async with session.post(f"{base}/validate", data=body) as response:
                        await response.read()
                        key = str(response.status)
                except aiohttp.ClientError as error:
                    key = type(error).__name__
                statuses[key] = statuses.get(key, 0) + 1

        await asyncio.gather(*(worker(bodies[i::concurrency]) for i in range(concurrency)))
        scrapes = []
        for _ in range(3):
            started = time.perf_counter()
            async with session.get(f"{base}/metrics") as response:
                page = await response.read()
            scrapes.append(time.perf_counter() - started)
    return {"reviews": count, "statuses": statuses, "metrics_bytes": len(page), "metrics_seconds": max(scrapes)}


async def hold_connections(
    host: str, port: int, context: ssl.SSLContext, tls: int, tcp: int, seconds: float
) -> dict[str, Any]:
    """tls idle TLS connections and tcp silent TCP ones, each reopened when the server closes it."""
    stop = asyncio.Event()
    opened = {"tls": 0, "tcp": 0, "errors": 0}
    gate = asyncio.Semaphore(64)  # handshakes in parallel, as a script would

    async def keep(secure: bool) -> None:
        while not stop.is_set():
            try:
                async with gate:
                    reader, writer = await asyncio.open_connection(
                        host, port, ssl=context if secure else None, server_hostname="localhost" if secure else None
                    )
                opened["tls" if secure else "tcp"] += 1
            except (OSError, ssl.SSLError, TimeoutError):
                opened["errors"] += 1
                await asyncio.sleep(0.5)
                continue
            read = asyncio.ensure_future(reader.read(1))
            await asyncio.wait([read, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
            read.cancel()
            writer.transport.abort()

    tasks = [asyncio.create_task(keep(True)) for _ in range(tls)]
    tasks += [asyncio.create_task(keep(False)) for _ in range(tcp)]
    started = time.time()
    while opened["tls"] < tls or opened["tcp"] < tcp:  # the window starts once every connection is open
        await asyncio.sleep(0.05)
    all_open = time.time()
    await asyncio.sleep(seconds)
    stopped = time.time()  # the window ends here: closing them all at once is not "holding" them
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        **opened,
        "opening_seconds": all_open - started,
        "all_open_at": all_open,
        "stopped_at": stopped,
        "held_seconds": stopped - all_open,
    }


async def heavy_senders(base: str, context: ssl.SSLContext, senders: int, seconds: float) -> dict[str, Any]:
    body = orjson.dumps(review(heavy_pod()))
    statuses: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=context, limit=senders), timeout=timeout
    ) as session:

        async def sender() -> None:
            while time.monotonic() < deadline:
                try:
                    async with session.post(f"{base}/validate", data=body) as response:
                        await response.read()
                        key = str(response.status)
                except (aiohttp.ClientError, TimeoutError) as error:
                    key = type(error).__name__
                statuses[key] = statuses.get(key, 0) + 1

        await asyncio.gather(*(sender() for _ in range(senders)))
    return {"body_mib": round(len(body) / MIB, 2), "senders": senders, "statuses": statuses}


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Report:
    server: str
    sizes: Sizes
    phases: dict[str, Any] = field(default_factory=dict)

    def verdicts(self) -> dict[str, bool]:
        m, c, h = self.phases["metrics"], self.phases["connections"], self.phases["heavy"]
        return {
            "metrics_bytes": m["metrics_bytes"] < TARGETS["metrics_bytes"],
            "metrics_seconds": m["metrics_seconds"] < TARGETS["metrics_seconds"],
            "idle_p99": c["legit"]["p99"] < TARGETS["idle_p99"],
            "idle_failures": c["legit"]["failures"] == 0,
            "idle_rss_mib": c["peak_rss_mib"] < TARGETS["idle_rss_mib"],
            "heavy_p99": h["legit"]["p99"] < TARGETS["heavy_p99"],
            "heavy_max": h["legit"]["max"] < TARGETS["heavy_max"],
        }


def raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


def run(command: list[str], rules: str, sizes: Sizes, extra: list[str] | None = None) -> Report:
    raise_fd_limit(sizes.idle_tls + sizes.silent_tcp + 1024)
    workdir = Path(tempfile.mkdtemp(prefix="gpu-webhook-attacks-"))
    server = ServerProcess(command, rules, workdir, extra or [])
    report = Report(server=" ".join(command), sizes=sizes)
    context = client_ssl(server.cert_dir)
    spawn = multiprocessing.get_context("spawn")
    windows: dict[str, tuple[float, float]] = {}
    try:
        asyncio.run(wait_ready(server, context))
        sampler = RssSampler(server)
        receive, send = spawn.Pipe(duplex=False)
        stop = spawn.Event()
        legit = spawn.Process(
            target=legit_client, args=(server.base, str(server.cert_dir), sizes.legit_rate, stop, send)
        )
        legit.start()
        time.sleep(2.0)  # the client's start-up

        start = time.time()
        report.phases["metrics"] = asyncio.run(random_kinds(server.base, context, sizes.random_kinds))
        windows["metrics"] = (start, time.time())

        report.phases["connections"] = asyncio.run(
            hold_connections("127.0.0.1", server.port, context, sizes.idle_tls, sizes.silent_tcp, sizes.hold_seconds)
        )
        all_open = report.phases["connections"].pop("all_open_at")
        windows["connections"] = (all_open, report.phases["connections"].pop("stopped_at"))
        report.phases["connections_opening"] = {}
        windows["connections_opening"] = (all_open - report.phases["connections"]["opening_seconds"], all_open)
        time.sleep(1.0)

        start = time.time()
        report.phases["heavy"] = asyncio.run(
            heavy_senders(server.base, context, sizes.heavy_senders, sizes.heavy_seconds)
        )
        windows["heavy"] = (start, time.time())
        time.sleep(1.0)
        stop.set()
        samples = receive.recv()
        legit.join()
        sampler.stop()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    for name, (start, end) in windows.items():
        report.phases[name]["legit"] = window(samples, start, end)
        report.phases[name]["peak_rss_mib"] = round(sampler.peak(start, end), 1)
    report.phases["whole_run"] = {"legit": window(samples, 0, time.time()), "peak_rss_mib": round(sampler.peak(), 1)}
    return report
