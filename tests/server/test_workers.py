"""`serve --workers 2`: two processes share the port, and SIGTERM drains both."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.support import (
    RULES,
    HeldBodies,
    client_ssl,
    free_port,
    gpu_pod,
    make_review,
    refuses_connections,
    wait_for,
    wait_ready,
)


def free_port_pair() -> int:
    """A port p with p + 1 free too (worker i serves metrics on p + i)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


@pytest.fixture
def workers(cert_dir: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    port, metrics_port = free_port(), free_port_pair()
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook.cli", "serve", "--workers", "2", "--port", str(port),
         "--metrics-port", str(metrics_port), "--cert-dir", str(cert_dir), "--rules", str(RULES),
         "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        yield process, port, metrics_port
    finally:
        if process.poll() is None:
            process.terminate()  # the supervisor drains and reaps its workers
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def ready(metrics_port: int) -> None:
    """Both workers answer /readyz on their own metrics port."""
    async with aiohttp.ClientSession() as session:
        for worker in range(2):
            await wait_ready(session, f"http://127.0.0.1:{metrics_port + worker}/readyz")


@pytest.fixture
async def fresh_connections(cert_dir: Path) -> AsyncIterator[aiohttp.ClientSession]:
    # force_close: every request on a new connection, so the kernel spreads them over both workers
    connector = aiohttp.TCPConnector(ssl=client_ssl(cert_dir), force_close=True, limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


async def test_two_workers_share_the_port_and_both_serve(workers, fresh_connections) -> None:
    _process, port, metrics_port = workers
    await ready(metrics_port)
    body = orjson.dumps(make_review(gpu_pod()))

    async def post() -> None:
        async with fresh_connections.post(f"https://localhost:{port}/mutate", data=body) as response:
            assert response.status == 200
            assert (await response.json())["response"]["allowed"] is True

    await asyncio.gather(*(post() for _ in range(40)))
    served = []
    async with aiohttp.ClientSession() as session:
        for worker in range(2):
            async with session.get(f"http://127.0.0.1:{metrics_port + worker}/metrics") as response:
                text = await response.text()
            served.append(sum(float(v) for v in re.findall(r"^gpu_webhook_requests_total\{.*\} (\S+)$", text, re.M)))
    assert sum(served) == 40
    assert all(count > 0 for count in served), served  # 40 new connections never all land on one worker


async def test_sigterm_drains_every_worker(workers, fresh_connections) -> None:
    process, port, metrics_port = workers
    await ready(metrics_port)
    held = HeldBodies(orjson.dumps(make_review(gpu_pod())))

    async def send() -> int:
        async with fresh_connections.post(f"https://localhost:{port}/mutate", data=held.body()) as response:
            assert (await response.json())["response"]["allowed"] is True
            return response.status

    # 16 connections: the chance that none reaches one of the two workers is 2 in 65,536
    in_flight = [asyncio.create_task(send()) for _ in range(16)]
    await wait_for(lambda: held.sent == 16)  # all are inside a worker, waiting for the rest of their bodies
    process.send_signal(signal.SIGTERM)
    await wait_for(lambda: refuses_connections(port))  # both workers closed their listeners
    held.release()
    assert await asyncio.gather(*in_flight) == [200] * 16
    assert await asyncio.to_thread(process.wait, 15) == 0
    with pytest.raises(aiohttp.ClientConnectorError):  # nobody listens any more
        await fresh_connections.get(f"https://localhost:{port}/healthz")


def worker_pids(parent: int) -> list[int]:
    children = Path(f"/proc/{parent}/task/{parent}/children")
    return [int(pid) for pid in children.read_text().split()] if children.exists() else []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
async def test_workers_exit_when_the_supervisor_is_killed(workers) -> None:
    process, _port, metrics_port = workers
    await ready(metrics_port)
    children = worker_pids(process.pid)
    assert len(children) == 2
    process.kill()  # SIGKILL: no chance to forward anything
    process.wait()
    await wait_for(lambda: not any(alive(pid) for pid in children))  # else: orphaned workers kept running


def test_workers_need_a_fixed_port(cert_dir: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--workers", "2", "--port", "0", "--cert-dir", str(cert_dir)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2 and "--workers needs a fixed --port" in result.stderr


def test_a_worker_config_error_stops_the_group(cert_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "rules"
    broken.mkdir()
    (broken / "bad.yaml").write_text("apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {}\n")
    result = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--workers", "2", "--port", str(free_port()),
         "--cert-dir", str(cert_dir), "--rules", str(broken)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
