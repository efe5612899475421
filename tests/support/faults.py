"""Faults under load: rule reloads, certificate swaps and a SIGTERM while requests keep coming.

`run(reloads, cert_swaps, concurrency)` starts `gpu-webhook serve` as a child process on
127.0.0.1, drives it with a bounded asyncio client loop (half the workers keep connections
alive, half open a new TLS connection per request so every certificate swap meets fresh
handshakes), and meanwhile:
- rewrites a rule file `reloads` times, waiting for each new generation in /readyz;
- replaces the serving certificate `cert_swaps` times (same CA, cert first, key 300 ms later:
  the order a careless writer produces), waiting for the reload to be counted in /metrics;
- sends SIGTERM with requests in flight, some of them slow senders, and stops issuing new
  requests halfway through the drain delay (when the endpoint would be gone in a cluster).
Every request issued must get a well-formed 200 answer: anything else is failed or lost.
tests/reliability/test_faults.py runs it short; `python -m bench.faults` long.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import ssl
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from tests.support.server import REPO, free_port
from webhook.certs import CA_FILE, CERT_FILE, KEY_FILE, generate_ca, generate_serving

DRAIN_DELAY = 1.0
RELOADED_RULE = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: fault-marker}}
spec:
  action: Warn
  match: {{kinds: [Pod]}}
  validate: {{expression: "true", message: "generation {n}"}}
"""


@dataclass
class Tally:
    issued: int = 0
    ok: int = 0
    failed: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.issued - self.ok - len(self.failed)


def review(gpu: bool) -> dict:
    # compliant with the whole default pack: a GPU container sizes CPU and memory too
    container = {"name": "c", "image": "x"}
    if gpu:
        container["resources"] = {
            "limits": {"nvidia.com/gpu": "1", "memory": "8Gi"},
            "requests": {"nvidia.com/gpu": "1", "memory": "8Gi", "cpu": "2"},
        }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}}
    pod["spec"] = {"containers": [container]}
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team-a",
        "operation": "CREATE",
        "userInfo": {"username": "load"},
        "object": pod,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def write_serving(cert_dir: Path, ca: tuple, gap: float = 0.0) -> None:
    """A new serving pair from the same CA; the cert lands before the key when gap > 0."""
    cert, key = generate_serving(ca[0], ca[1], ["localhost"], ["127.0.0.1"])
    from cryptography.hazmat.primitives import serialization

    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    for name, data in ((CERT_FILE, cert_pem), (KEY_FILE, key_pem)):
        temporary = cert_dir / f".{name}.tmp"
        temporary.write_bytes(data)
        os.chmod(temporary, 0o600)
        os.replace(temporary, cert_dir / name)
        time.sleep(gap)


class Harness:
    def __init__(self, workdir: Path, concurrency: int) -> None:
        self.workdir = workdir
        self.rules = workdir / "rules"
        self.certs = workdir / "certs"
        self.port = free_port()
        self.concurrency = concurrency
        self.tally = Tally()
        self.issuing = True
        self.process: asyncio.subprocess.Process | None = None
        shutil.copytree(REPO / "rules", self.rules, ignore=shutil.ignore_patterns("tests"))
        self.certs.mkdir()
        self.ca = generate_ca("faults CA")
        from cryptography.hazmat.primitives import serialization

        (self.certs / CA_FILE).write_bytes(self.ca[0].public_bytes(serialization.Encoding.PEM))
        write_serving(self.certs, self.ca)
        (self.rules / "zz-fault-marker.yaml").write_text(RELOADED_RULE.format(n=0))
        self.client_ssl = ssl.create_default_context(cafile=str(self.certs / CA_FILE))
        self.base = f"https://localhost:{self.port}"

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "webhook.cli", "serve", "--rules", str(self.rules), "--cert-dir", str(self.certs),
            "--port", str(self.port), "--reload-interval", "0.05", "--drain-delay", str(DRAIN_DELAY),
            "--shutdown-timeout", "10", "--log-level", "warning",
            cwd=REPO, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if (await self.readyz())["ready"]:
                    return
            except (aiohttp.ClientError, OSError):
                await asyncio.sleep(0.1)
        raise RuntimeError("server did not become ready")

    async def readyz(self) -> dict:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.client_ssl)) as session,
            session.get(f"{self.base}/readyz") as response,
        ):
            return json.loads(await response.text())

    async def metric(self, name: str) -> float:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.client_ssl)) as session,
            session.get(f"{self.base}/metrics") as response,
        ):
            found = re.search(rf"^{name} (\S+)$", await response.text(), re.MULTILINE)
            return float(found.group(1)) if found else 0.0

    async def one(self, session: aiohttp.ClientSession, index: int, slow: bool = False) -> None:
        body = orjson.dumps(review(gpu=index % 2 == 0))
        uid = orjson.loads(body)["request"]["uid"]
        endpoint = "mutate" if index % 3 else "validate"

        async def trickle():  # a slow sender: the body arrives over ~0.3 s
            for start in range(0, len(body), max(1, len(body) // 6)):
                yield body[start : start + max(1, len(body) // 6)]
                await asyncio.sleep(0.05)

        self.tally.issued += 1
        try:
            async with session.post(f"{self.base}/{endpoint}", data=trickle() if slow else body) as response:
                text = await response.text()
                answer = orjson.loads(text)["response"] if response.status == 200 else None
                # every pod sent is compliant: a denial (a rule error, a spent time budget) is a failure
                # too, and a GPU pod must get its patch from /mutate
                wanted_patch = endpoint == "mutate" and index % 2 == 0
                if (
                    answer is None
                    or answer["uid"] != uid
                    or answer["allowed"] is not True
                    or ("patch" in answer) != wanted_patch
                ):
                    self.tally.failed.append(f"HTTP {response.status}: {text[:200]}")
                    return
        except (aiohttp.ClientError, OSError, orjson.JSONDecodeError, KeyError) as error:
            self.tally.failed.append(f"{type(error).__name__}: {error}")
            return
        self.tally.ok += 1

    async def worker(self, number: int) -> None:
        fresh = number % 2 == 1  # new TLS connection per request: meets every certificate swap
        connector = aiohttp.TCPConnector(ssl=self.client_ssl, force_close=fresh, limit=1)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=20)) as session:
            index = number
            while self.issuing:
                await self.one(session, index, slow=number == 0 and index % 10 == 0)
                index += self.concurrency

    async def reloads(self, count: int, cert_swaps: int) -> tuple[int, int]:
        swap_every = max(1, count // cert_swaps) if cert_swaps else 0
        swaps = 0
        start_generation = (await self.readyz())["rules"]["generation"]
        for n in range(1, count + 1):
            (self.rules / "zz-fault-marker.yaml").write_text(RELOADED_RULE.format(n=n))
            await self.wait_for(lambda d, n=n: d["rules"]["generation"] >= start_generation + n, "rule reload")
            if swap_every and n % swap_every == 0 and swaps < cert_swaps:
                before = await self.metric("gpu_webhook_certificate_reloads_total")
                await asyncio.to_thread(write_serving, self.certs, self.ca, 0.3)
                deadline = time.monotonic() + 5
                while await self.metric("gpu_webhook_certificate_reloads_total") <= before:
                    if time.monotonic() > deadline:
                        raise RuntimeError("certificate swap not picked up")
                    await asyncio.sleep(0.05)
                swaps += 1
        generation = (await self.readyz())["rules"]["generation"] - start_generation
        return generation, swaps

    async def wait_for(self, predicate, what: str) -> None:
        deadline = time.monotonic() + 5
        while not predicate(await self.readyz()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not seen within 5 s")
            await asyncio.sleep(0.02)

    async def sigterm(self) -> tuple[int, float]:
        """SIGTERM with requests in flight; stop issuing when the endpoint would be gone; wait for exit."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(DRAIN_DELAY / 2)
        self.issuing = False
        code = await asyncio.wait_for(self.process.wait(), 30)
        return code, time.monotonic() - started


async def run(reloads: int, cert_swaps: int, concurrency: int, settle: float = 0.5) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="gpu-webhook-faults-"))
    harness = Harness(workdir, concurrency)
    await harness.start()
    started = time.monotonic()
    workers = [asyncio.create_task(harness.worker(n)) for n in range(concurrency)]
    try:
        await asyncio.sleep(settle)
        generations, swaps = await harness.reloads(reloads, cert_swaps)
        await asyncio.sleep(settle)
        exit_code, drain_seconds = await harness.sigterm()
        await asyncio.gather(*workers)
    finally:
        harness.issuing = False
        if harness.process is not None and harness.process.returncode is None:
            harness.process.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    tally = harness.tally
    return {
        "seconds": round(time.monotonic() - started, 1),
        "rule reloads": generations,
        "certificate swaps": swaps,
        "requests issued": tally.issued,
        "answered 200": tally.ok,
        "failed": len(tally.failed),
        "lost": tally.lost,
        "server exit code": exit_code,
        "drain seconds": round(drain_seconds, 2),
        "failures": tally.failed[:20],
    }
