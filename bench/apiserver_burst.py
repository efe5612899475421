"""A burst of pod creates through a real kube-apiserver: `python -m bench.apiserver_burst`.

The set-up of bench.apiserver_path (envtest's etcd + kube-apiserver, the rendered registration
narrowed to one namespace per configuration, the tenant namespace of docs/operations.md), then
`--creates` server-side dry-run creates of the GPU pod from `--clients` concurrent clients, as
fast as they are answered (a 2,000-pod JobSet landing at once), in four configurations:

    none         bench-none: no webhook selects it (what the apiserver alone sustains here)
    noop         bench-noop: the no-op webhook (bench/noop_server.py) with the same registration:
                 what any webhook on this stack costs a burst (TLS, HTTP, the apiserver's calls)
    replicas-1   bench-r1: one `gpu-webhook serve` (the full pack, namespace watch)
    replicas-N   bench-rN: `gpu-webhook serve --workers N`: N server processes on one port
                 (SO_REUSEPORT), the kernel spreading the apiserver's connections over them

The Deployment runs its replicas as pods behind a Service; envtest has no Service proxy (no
kube-proxy, no endpoints controller), so the N replicas are N processes behind one address, which
is what the Service gives the apiserver: one name, connections spread over the replicas.

For each burst: failures (an answer other than 201) and time-outs among them (the client's
`--timeout`, or the apiserver's webhook deadline), p50/p99/max, creates/s, the peak memory of
each server process (proportional set size, sampled every 50 ms), the requests each replica
answered, and the apiserver's `apiserver_admission_webhook_admission_duration_seconds` beside the
servers' `gpu_webhook_request_duration_seconds`. Bursts alternate (`--rounds`), warm-up first.
Prints the goals (0 failures, 0 time-outs, p99 <= 50 ms, <= 256 MiB per replica) against each
burst, and writes bench/results/tmp/burst-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench import handler_time
from bench.apiserver_path import (
    CLUSTER_FLAGS,
    IMAGE,
    NATIVE,
    RESULTS,
    TARGET,
    TENANT_ANNOTATIONS,
    TENANT_LABELS,
    apiserver_histogram,
    cli,
    gpu_webhook_server,
    noop_server,
    percentile,
    pod,
    registration,
    run_on_envtest,
    save,
    serving_certs,
    snapshot_rules,
    wait_until_called,
)
from tests.support.envtest import EnvTest, free_port
from webhook.certs import CA_FILE
from webhook.kubeyaml import plain_documents

GOAL_P99_MS = 50.0
GOAL_RSS_MIB = 256.0


def process_tree(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            stack.extend(int(c) for c in Path(f"/proc/{current}/task/{current}/children").read_text().split())
    return found


def pss_mib(pid: int) -> float:
    """Proportional set size (a page shared with a forked sibling counted once, as the pod's cgroup does)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class MemorySampler:
    """Peak PSS of every process under `root` (a supervisor's workers are the replicas), every 50 ms."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peaks: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for pid in process_tree(self.root):
                self.peaks[pid] = max(self.peaks.get(pid, 0.0), pss_mib(pid))


async def burst(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str], count: int, clients: int
) -> dict[str, Any]:
    latencies: list[float] = []
    failures: list[str] = []
    timeouts = 0
    remaining = count

    async def client() -> None:
        nonlocal remaining, timeouts
        while remaining > 0:
            remaining -= 1
            began = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    payload = await response.read()
                status, text = response.status, payload[:300].decode(errors="replace")
            except TimeoutError:
                status, text = 0, "client timeout"
            latencies.append((time.perf_counter() - began) * 1e3)
            if status != 201:
                failures.append(f"{status} {text}")
                timeouts += status == 0 or "deadline" in text or "timeout" in text.lower()

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - began
    return {"latencies": latencies, "wall": wall, "failures": failures, "timeouts": timeouts}


async def measure(env: EnvTest, targets: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    context = ssl.create_default_context(cafile=str(env.ca_file))
    headers = {"Authorization": f"Bearer {env.token}", "Content-Type": "application/json", "Accept": "application/json"}
    connector = aiohttp.TCPConnector(limit=args.clients, ssl=context)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    rows: list[dict[str, Any]] = []
    names = list(targets)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for target in targets.values():
            body = json.dumps(pod("gpu", target["namespace"])).encode()
            await burst(session, target["url"], body, headers, args.warmup, args.clients)
        for round_number in range(args.rounds):
            for name in names[round_number % len(names) :] + names[: round_number % len(names)]:
                target = targets[name]
                body = json.dumps(pod("gpu", target["namespace"])).encode()
                ports = target.get("metrics_ports", [])
                first_api = apiserver_histogram(env)
                first = [handler_time.scrape(p) for p in ports]
                root = target.get("pid")
                sampler = MemorySampler(root) if root else contextlib.nullcontext()
                with sampler:
                    outcome = await burst(session, target["url"], body, headers, args.creates, args.clients)
                last_api = apiserver_histogram(env)
                last = [handler_time.scrape(p) for p in ports]
                rows.append(summarise(name, round_number, outcome, first_api, last_api, first, last, sampler))
                print(line(rows[-1]), flush=True)
    return rows


def summarise(
    name: str,
    round_number: int,
    outcome: dict[str, Any],
    first_api: dict[str, dict[str, float]],
    last_api: dict[str, dict[str, float]],
    first: list[dict[str, handler_time.Histogram]],
    last: list[dict[str, handler_time.Histogram]],
    sampler: Any,
) -> dict[str, Any]:
    latencies = outcome["latencies"]
    apiserver: dict[str, float] = {}
    for webhook, entry in last_api.items():
        if webhook == NATIVE:
            continue  # the ValidatingAdmissionPolicy plugin: no policy is installed here
        prior = first_api.get(webhook, {"count": 0.0, "sum": 0.0})
        calls = entry["count"] - prior["count"]
        if calls:
            apiserver[webhook] = (entry["sum"] - prior["sum"]) / calls * 1e3
    handled: dict[str, handler_time.Histogram] = {}
    per_replica: list[float] = []
    for before, after in zip(first, last, strict=True):
        requests = 0.0
        for endpoint, histogram in after.items():
            delta = handler_time.between(before.get(endpoint), histogram)
            requests += delta.count
            acc = handled.setdefault(endpoint, handler_time.Histogram())
            acc.total += delta.total
            acc.count += delta.count
            for bound, count in delta.buckets.items():
                acc.buckets[bound] = acc.buckets.get(bound, 0.0) + count
        per_replica.append(requests)
    peaks = getattr(sampler, "peaks", {})
    return {
        "config": name,
        "round": round_number + 1,
        "creates": len(latencies),
        "failures": len(outcome["failures"]),
        "timeouts": outcome["timeouts"],
        "failure_examples": outcome["failures"][:3],
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies),
        "creates_per_s": len(latencies) / outcome["wall"],
        "apiserver_webhook_mean_ms": apiserver,
        "handler": {
            endpoint: {"mean_ms": h.total / h.count * 1e3, "p99_ms": handler_time.quantile(h, 0.99) * 1e3}
            for endpoint, h in sorted(handled.items())
            if h.count
        },
        "requests_per_replica": per_replica,
        # the supervisor of --workers N only forks and waits: the replicas are its children
        "peak_pss_mib_per_process": sorted((round(v, 1) for v in peaks.values()), reverse=True),
    }


def line(row: dict[str, Any]) -> str:
    api = " / ".join(f"{ms:.2f}" for _, ms in sorted(row["apiserver_webhook_mean_ms"].items()))
    handler = " / ".join(f"{e} {h['mean_ms']:.2f} (p99 {h['p99_ms']:.1f})" for e, h in row["handler"].items())
    memory = row["peak_pss_mib_per_process"]
    return (
        f"{row['config']:<11} round {row['round']}: {row['creates']} creates, {row['failures']} failed "
        f"({row['timeouts']} timed out), p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, max "
        f"{row['max_ms']:.1f} ms, {row['creates_per_s']:.0f}/s"
        + (f"; apiserver's webhook calls (mean ms) {api}" if api else "")
        + (f"; handler mean ms {handler}" if handler else "")
        + (
            f"; requests per replica {[int(r) for r in row['requests_per_replica']]}"
            if row["requests_per_replica"]
            else ""
        )
        + (f"; peak PSS MiB per process {memory}" if memory else "")
    )


def goals(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    floor = [r["p99_ms"] for r in rows if r["config"] == "none"]
    noop = [r["p99_ms"] for r in rows if r["config"] == "noop"]
    for row in rows:
        if row["config"] in ("none", "noop"):
            continue
        memory = max(row["peak_pss_mib_per_process"] or [0.0])
        checks = {
            "0 failures": row["failures"] == 0,
            "0 time-outs": row["timeouts"] == 0,
            f"p99 <= {GOAL_P99_MS:.0f} ms": row["p99_ms"] <= GOAL_P99_MS,
            f"<= {GOAL_RSS_MIB:.0f} MiB per replica": memory <= GOAL_RSS_MIB,
        }
        missed = [goal for goal, met in checks.items() if not met]
        out.append(
            f"{row['config']} round {row['round']}: p99 {row['p99_ms']:.1f} ms (in the same run, no webhook: "
            f"{', '.join(f'{p:.1f}' for p in floor)} ms; the no-op webhook: {', '.join(f'{p:.1f}' for p in noop)} ms), "
            f"peak {memory:.0f} MiB per replica: "
            + ("all goals met" if not missed else "NOT met: " + ", ".join(missed))
        )
    return out


def free_port_block(count: int) -> int:
    """The first of `count` consecutive loopback ports nothing listens on now: worker i of `serve
    --workers` takes its metrics port + i, and a port taken there stops that worker's metrics."""
    while True:
        first = free_port()
        try:
            with contextlib.ExitStack() as probes:
                for port in range(first, first + count):
                    probe = probes.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                    probe.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-burst-") as scratch, contextlib.ExitStack() as stack:
        tmp = Path(scratch)
        rendered_certs, serving = serving_certs(tmp)
        pack = snapshot_rules(tmp)
        full = [
            d
            for d in plain_documents(
                cli("manifests", "--ca", str(rendered_certs), "--rules", str(pack), "--image", IMAGE)
            )
            if d
        ]
        env = stack.enter_context(EnvTest.start(apiserver_args=CLUSTER_FLAGS))
        ca_pem = (serving / CA_FILE).read_bytes()
        targets: dict[str, dict[str, Any]] = {}
        for name, namespace, workers in (
            ("none", "bench-none", 0),
            ("noop", "bench-noop", 0),
            ("replicas-1", "bench-r1", 1),
            (f"replicas-{args.replicas}", f"bench-r{args.replicas}", args.replicas),
        ):
            env.create_namespace(namespace, {**TENANT_LABELS, TARGET: name}, TENANT_ANNOTATIONS)
            target: dict[str, Any] = {
                "namespace": namespace,
                "url": f"{env.url}/api/v1/namespaces/{namespace}/pods?dryRun=All",
            }
            if name == "noop":
                port = free_port()
                child = stack.enter_context(noop_server(tmp, serving, port))
                target.update(pid=child.pid)
                webhooks, _ = registration(full, name)
                env.install_webhooks(webhooks, f"https://127.0.0.1:{port}", ca_pem)
            if workers:
                port, metrics_port = free_port(), free_port_block(workers)
                ports = [metrics_port + i for i in range(workers)]
                child = stack.enter_context(
                    gpu_webhook_server(name, tmp, serving, port, metrics_port, pack, env.kubeconfig, workers)
                )
                target.update(pid=child.pid, metrics_ports=ports)
                webhooks, _ = registration(full, name)
                env.install_webhooks(webhooks, f"https://127.0.0.1:{port}", ca_pem)
            targets[name] = target
        wait_until_called(env, [n for n in targets if n != "none"], {n: t["namespace"] for n, t in targets.items()})
        return asyncio.run(measure(env, targets, args))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=2000, help="creates per burst (default 2000)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument(
        "--replicas", type=int, default=3, help="server processes of the multi-replica burst (default 3)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="bursts per configuration, alternating (default 1)")
    parser.add_argument("--warmup", type=int, default=50, help="unmeasured creates per configuration first")
    parser.add_argument("--timeout", type=float, default=30.0, help="the client's time-out per create, seconds")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows, meta = run_on_envtest("bench.apiserver_burst", run, args)
    for text in goals(rows):
        print(text)
    save(args.out, "burst", {"rows": rows, "meta": meta})
    return 0


if __name__ == "__main__":
    sys.exit(main())
