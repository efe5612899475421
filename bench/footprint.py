"""Measure the memory and CPU footprint of `gpu-webhook serve` under a burst of admission requests.

Sizing input for the Deployment's requests and limits (docs/operations.md, "Sizing"): starts
the real server as a subprocess with the default rule pack, reads VmRSS/VmHWM and CPU time
from /proc before and after a burst of keep-alive requests (GPU pods, CPU pods, Deployments).

    python bench/footprint.py [--requests 20000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import client_ssl, cpu_pod, gpu_pod, make_review  # noqa: E402
from webhook.certs import generate_bundle, write_bundle  # noqa: E402


def proc_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])  # kB
    return fields


def cpu_seconds(pid: int) -> float:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def deployment() -> dict:
    pod = gpu_pod("worker", gpus=2)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "inference", "namespace": "team-a"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {}, "spec": pod["spec"]},
        },
    }


async def burst(base: str, cert_dir: Path, total: int, concurrency: int) -> float:
    bodies = [make_review(gpu_pod()), make_review(cpu_pod()), make_review(deployment())]
    connector = aiohttp.TCPConnector(ssl=client_ssl(cert_dir), limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        counter = iter(range(total))

        async def worker() -> None:
            for i in counter:
                endpoint = "mutate" if i % 2 else "validate"
                async with session.post(f"{base}/{endpoint}", json=bodies[i % 3]) as response:
                    assert response.status == 200, await response.text()
                    await response.read()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--port", type=int, default=18443)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = Path(tmp)
        write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), cert_dir)
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "webhook.cli",
                "serve",
                "--port",
                str(args.port),
                "--cert-dir",
                tmp,
                "--rules",
                str(REPO / "rules"),
                "--log-level",
                "warning",
            ],
            cwd=REPO,
        )
        try:
            time.sleep(3)  # import + rule compilation
            idle, idle_cpu = proc_status(server.pid), cpu_seconds(server.pid)
            elapsed = asyncio.run(burst(f"https://localhost:{args.port}", cert_dir, args.requests, args.concurrency))
            busy, busy_cpu = proc_status(server.pid), cpu_seconds(server.pid)
        finally:
            server.terminate()
            server.wait(10)
    print(f"idle RSS        {idle['VmRSS'] / 1024:.1f} MiB")
    print(f"after burst RSS {busy['VmRSS'] / 1024:.1f} MiB (peak {busy['VmHWM'] / 1024:.1f} MiB)")
    print(f"startup CPU     {idle_cpu:.2f} s")
    print(
        f"burst           {args.requests} requests, {args.concurrency} connections, {elapsed:.2f} s, "
        f"{args.requests / elapsed:.0f} req/s, server CPU {busy_cpu - idle_cpu:.2f} s "
        f"({(busy_cpu - idle_cpu) / elapsed:.2f} cores)"
    )


if __name__ == "__main__":
    main()
