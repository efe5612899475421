"""`serve --loop uvloop` (the `fast` extra) over real TLS: handshakes, answers and the connection guard.

The guard starts TLS itself after a connection's first bytes (webhook/server/connections.py) on
whatever transport the loop made: uvloop's has asyncio's methods without subclassing asyncio.Transport.
Skipped without uvloop, except where GPU_WEBHOOK_REQUIRE_UVLOOP is set (.ci/run installs the extra
for this test and sets it), so CI cannot pass with it skipped.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.support import RULES, client_ssl, free_port, gpu_pod, make_review, wait_ready

if os.environ.get("GPU_WEBHOOK_REQUIRE_UVLOOP"):
    import uvloop  # noqa: F401  # required: an ImportError fails the run
else:
    pytest.importorskip("uvloop", reason="uvloop not installed (the `fast` extra)")

HANDSHAKE_TIMEOUT = 2


@pytest.fixture
def server(cert_dir: Path, tmp_path: Path) -> Iterator[tuple[int, int, Path]]:
    port, metrics_port = free_port(), free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "webhook.cli", "serve", "--loop", "uvloop", "--port", str(port),
             "--metrics-port", str(metrics_port), "--cert-dir", str(cert_dir), "--rules", str(RULES),
             "--handshake-timeout", str(HANDSHAKE_TIMEOUT)],
            stdout=out, stderr=out,
        )  # fmt: skip
    try:
        yield port, metrics_port, log
    finally:
        process.terminate()
        process.wait(15)


async def test_uvloop_serves_admission_reviews_and_drops_silent_connections(
    server: tuple[int, int, Path], cert_dir: Path
) -> None:
    port, metrics_port, log = server
    async with aiohttp.ClientSession() as plain:
        await wait_ready(plain, f"http://127.0.0.1:{metrics_port}/readyz")
    review = make_review(gpu_pod())
    body = orjson.dumps(review)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
        for path in ("/mutate", "/validate"):
            async with session.post(f"https://127.0.0.1:{port}{path}", data=body) as answer:
                assert answer.status == 200
                answered = orjson.loads(await answer.read())
                assert answered["response"]["uid"] == review["request"]["uid"]

    def silent() -> float:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.settimeout(HANDSHAKE_TIMEOUT * 5)
            began = time.monotonic()
            assert sock.recv(16) == b""  # closed by the server, not by our timeout
            return time.monotonic() - began

    assert await asyncio.to_thread(silent) < HANDSHAKE_TIMEOUT * 3
    assert "Traceback" not in log.read_text()
