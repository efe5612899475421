"""Long-form fuzz: tens of thousands of hostile AdmissionReviews and misbehaving clients.

    python -m bench.fuzz --cases 10000 --abuses 200 [--seed 1]

Starts a real server in this process on 127.0.0.1 (throw-away certificates, the default
rule pack), sends every case, then checks that a good request is answered and that no
request is left in flight. Prints the counts and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.support import RULES, client_ssl, cpu_pod, make_review, start_server
from tests.support.hostile import ABUSES, abuse, abuse_verdict, cases, send_cases
from webhook.certs import generate_bundle, write_bundle


async def main(count: int, abuses: int, seed: int, concurrency: int) -> int:
    logging.getLogger("gpu_webhook").disabled = True  # hundreds of thousands of log lines help nobody here
    cert_dir = Path(tempfile.mkdtemp(prefix="fuzz-certs-"))
    write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), cert_dir)
    server = await start_server(cert_dir, RULES, body_timeout=0.5, idle_timeout=2.0)
    logging.getLogger("gpu_webhook").setLevel(logging.WARNING)
    context = client_ssl(cert_dir)
    base = f"https://localhost:{server.port}"
    started = time.perf_counter()
    failures: list[str] = []
    try:
        counts, body_failures = await send_cases(base, context, cases(count, seed), concurrency)
        failures += body_failures
        print(f"bodies: {sum(counts.values())} cases in {time.perf_counter() - started:.1f}s")
        for key, n in sorted(counts.items()):
            print(f"  {key:28} {n}")
        rng = random.Random(seed)
        outcomes: Counter[str] = Counter()
        abuse_started = time.perf_counter()
        for round_ in range(0, abuses, 20):
            kinds = [ABUSES[(round_ + i) % len(ABUSES)] for i in range(min(20, abuses - round_))]
            results = await asyncio.gather(*(abuse("127.0.0.1", server.port, context, k, rng) for k in kinds))
            for kind, outcome in zip(kinds, results, strict=True):
                outcomes[f"{kind}: {outcome[:40]}"] += 1
                problem = abuse_verdict(kind, outcome)
                if problem:
                    failures.append(f"abuse {kind}: {problem}")
        print(
            f"clients: {sum(outcomes.values())} misbehaving connections in {time.perf_counter() - abuse_started:.1f}s"
        )
        for key, n in sorted(outcomes.items()):
            print(f"  {key:60} {n}")
        # nothing stuck: in-flight drains, and a good request is served right after
        deadline = time.monotonic() + 5
        while server.state.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if server.state.in_flight:
            failures.append(f"{server.state.in_flight} requests still in flight after the run")
        import aiohttp

        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
            session.post(f"{base}/validate", json=make_review(cpu_pod())) as response,
        ):
            answer = await response.json()
            if response.status != 200 or answer["response"]["allowed"] is not True:
                failures.append(f"good request after the run got {response.status}")
    finally:
        await server.stop()
    tried = count + abuses
    print(f"total: {tried} cases tried, {len(failures)} failures")
    for failure in failures[:50]:
        print("  FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--abuses", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.cases, args.abuses, args.seed, args.concurrency)))
