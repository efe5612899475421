"""A namespace approver at full rate against the webhook, through a real kube-apiserver:
`KUBEBUILDER_ASSETS=... python -m bench.namespace_approver`.

The set-up of bench.apiserver_path (envtest, the rendered registration narrowed to this run's
namespaces, one `gpu-webhook serve` with the full pack and the namespace watch) plus the shipped CRDs.
Each round measures three phases with the same tenant load, `--creates` server-side dry-run creates of
the GPU pod from `--clients` concurrent clients in `bench-tenant`:

    baseline       the tenants alone
    approver       the same, while `--approvers` clients in `bench-approver` (a process of their own, as the
                   namespace user `bench-approver`, impersonated, with RBAC to create GPUPolicyExceptions
                   there) send dry-run GPUPolicyExceptions as fast as they are answered, in turn
                   (`--payloads`) an oversized one (45,000 near-miss rule names, 1.4 MB: the attack of
                   issue 34) and a near-bound one (128 near-miss rule names, 64 selector labels, a 1 KiB
                   reason: what the CRD lets through, so the webhook's check runs), and the platform admin
                   dry-run creates a GPUPolicy every `--admin-interval` seconds (2; in the baseline too)
    approver-fair  the same with manifests/components/api-fairness applied (its FlowSchema queues the
                   approver's writes in a priority level of their own; removed after the phase)

For each phase: the tenants' p50/p99 and refused creates, the approver's answers by HTTP status, the
admin's slowest apply and its statuses, the server's CPU seconds (its process and its check process) and
the kube-apiserver's, and, after the approver phase, the server's CPU in the `--idle` seconds after the approver stopped.
Prints approver p99 / baseline p99 of the same round against the goal (<= 1.5x, 0 refused, the admin
within 2 s), and writes bench/results/tmp/approver-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.apiserver_burst import process_tree
from bench.apiserver_path import (
    CLUSTER_FLAGS,
    IMAGE,
    REPO,
    RESULTS,
    TARGET,
    TENANT_ANNOTATIONS,
    TENANT_LABELS,
    cli,
    gpu_webhook_server,
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

CONFIG = "approver"
TENANT, APPROVER = "bench-tenant", "bench-approver"
API = "/apis/gpu-webhook.io/v1alpha1"
APPROVER_USER = "bench-approver"  # the namespace user the approver clients act as (impersonated)
FAIRNESS = REPO / "manifests/components/api-fairness/flowcontrol.yaml"
GOAL_RATIO, GOAL_ADMIN_S = 1.5, 2.0
TICKS = os.sysconf("SC_CLK_TCK")


def exception(index: int, oversized: bool) -> dict[str, Any]:
    count = 45_000 if oversized else 128
    spec: dict[str, Any] = {
        "rules": [f"gpu-container-resourcez-{i:05d}" for i in range(count)],
        "reason": "r" * 1024,
    }
    if not oversized:
        spec["match"] = {"objectSelector": {"matchLabels": {f"team.example.com/k{k:02d}": "v" * 63 for k in range(64)}}}
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {"name": f"flood-{index}", "namespace": APPROVER},
        "spec": spec,
    }


def gpupolicy(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicy",
        "metadata": {"name": f"site-rule-{index}"},
        "spec": {"match": {"kinds": ["Pod"]}, "validate": {"expression": "true", "message": "never"}},
    }


def cpu_seconds(root: int) -> float:
    """CPU seconds of `root` and its children (live ones, and the waited-for ones it accounts)."""
    total = 0.0
    for number, pid in enumerate(process_tree(root)):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
        total += utime + stime + (cutime + cstime if number == 0 else 0)
    return total / TICKS


def install_crds(env: EnvTest) -> None:
    documents = [d for d in plain_documents((REPO / "manifests/base/crds.yaml").read_text()) if d]
    for document in documents:
        made = env.create(document)
        if not made.ok:
            raise SystemExit(f"CRD {document['metadata']['name']}: {made.status} {made.message}")
    deadline = time.monotonic() + 30
    while env.request("GET", f"{API}/namespaces/{APPROVER}/gpupolicyexceptions").status != 200:
        if time.monotonic() > deadline:
            raise SystemExit("the CRDs were not served within 30 s")
        time.sleep(0.2)


async def tenants(session: aiohttp.ClientSession, env: EnvTest, headers: dict[str, str], args: Any) -> dict[str, Any]:
    url = f"{env.url}/api/v1/namespaces/{TENANT}/pods?dryRun=All"
    body = json.dumps(pod("gpu", TENANT)).encode()
    latencies: list[float] = []
    refused: list[str] = []
    remaining = args.creates

    async def client() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            began = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    text = (await response.read())[:200].decode(errors="replace")
                    status = response.status
            except TimeoutError:
                status, text = 0, "client timeout"
            latencies.append((time.perf_counter() - began) * 1e3)
            if status != 201:
                refused.append(f"{status} {text}")

    await asyncio.gather(*(client() for _ in range(args.clients)))
    return {
        "creates": len(latencies),
        "refused": len(refused),
        "refused_examples": refused[:3],
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 0.99),
    }


async def approver(
    session: aiohttp.ClientSession,
    base: str,
    headers: dict[str, str],
    stop: asyncio.Event,
    index: int,
    kinds: list[str],
) -> dict[str, int]:
    url = f"{base}{API}/namespaces/{APPROVER}/gpupolicyexceptions?dryRun=All"
    bodies = {kind: json.dumps(exception(index, kind == "oversized")).encode() for kind in kinds}
    statuses: dict[str, int] = {}
    sent = 0
    while not stop.is_set():
        kind = kinds[sent % len(kinds)]
        try:
            async with session.post(url, data=bodies[kind], headers=headers) as response:
                await response.read()
                status = str(response.status)
        except TimeoutError:
            status = "timeout"
        key = f"{kind} {status}"
        statuses[key] = statuses.get(key, 0) + 1
        sent += 1
    return statuses


def flood(url: str, token: str, ca_file: str, approvers: int, kinds: list[str], stop: Any, results: Any) -> None:
    """In a process of its own (as an attacker is): `approvers` clients until `stop` is set; their answers to `results`."""

    async def main() -> dict[str, int]:
        context = ssl.create_default_context(cafile=ca_file)
        headers = {
            "Authorization": f"Bearer {token}",
            "Impersonate-User": APPROVER_USER,  # a namespace user, not the exempt admin: API fairness applies
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        done = asyncio.Event()
        connector = aiohttp.TCPConnector(limit=approvers, ssl=context)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
            clients = [asyncio.ensure_future(approver(session, url, headers, done, i, kinds)) for i in range(approvers)]
            while not stop.is_set():
                await asyncio.sleep(0.05)
            done.set()
            answers: dict[str, int] = {}
            for statuses in await asyncio.gather(*clients):
                for key, count in statuses.items():
                    answers[key] = answers.get(key, 0) + count
        return answers

    results.put(asyncio.run(main()))


async def admin(
    session: aiohttp.ClientSession, env: EnvTest, headers: dict[str, str], stop: asyncio.Event, interval: float
) -> dict[str, Any]:
    url = f"{env.url}{API}/gpupolicies?dryRun=All"
    seconds: list[float] = []
    statuses: dict[str, int] = {}
    index = 0
    while not stop.is_set():
        began = time.perf_counter()
        try:
            async with session.post(url, data=json.dumps(gpupolicy(index)).encode(), headers=headers) as response:
                await response.read()
                status = str(response.status)
        except TimeoutError:
            status = "timeout"
        seconds.append(time.perf_counter() - began)
        statuses[status] = statuses.get(status, 0) + 1
        index += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, interval - seconds[-1]))
    return {"applies": len(seconds), "max_s": max(seconds, default=0.0), "statuses": statuses}


async def measure(env: EnvTest, server_pid: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    apiserver_pid = env._apiserver.pid if env._apiserver is not None else None
    context = ssl.create_default_context(cafile=str(env.ca_file))
    headers = {"Authorization": f"Bearer {env.token}", "Content-Type": "application/json", "Accept": "application/json"}
    connector = aiohttp.TCPConnector(limit=args.clients + args.approvers + 2, ssl=context)
    rows: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        warm = argparse.Namespace(creates=args.warmup, clients=args.clients)
        await tenants(session, env, headers, warm)
        for round_number in range(1, args.rounds + 1):
            for phase in ("baseline", "approver", "approver-fair"):
                fairness = apply_fairness(env) if phase == "approver-fair" else []
                stop = asyncio.Event()
                cpu = cpu_seconds(server_pid)
                api_cpu = cpu_seconds(apiserver_pid) if apiserver_pid else 0.0
                began = time.perf_counter()
                side = []
                spawned = multiprocessing.get_context("spawn")
                flooding, results = spawned.Event(), spawned.Queue()
                attacker = None
                if phase != "baseline":
                    attacker = spawned.Process(
                        target=flood,
                        args=(env.url, env.token, str(env.ca_file), args.approvers, args.payloads, flooding, results),
                    )
                    attacker.start()
                side.append(asyncio.ensure_future(admin(session, env, headers, stop, args.admin_interval)))
                load = await tenants(session, env, headers, args)
                stop.set()
                flooding.set()
                done = [await task for task in side]
                if attacker is not None:
                    done.insert(0, await asyncio.to_thread(results.get, True, 60))
                    attacker.join(10)
                row: dict[str, Any] = {"round": round_number, "phase": phase, "seconds": time.perf_counter() - began}
                row.update(load)
                row["server_cpu_s"] = cpu_seconds(server_pid) - cpu
                row["apiserver_cpu_s"] = (cpu_seconds(apiserver_pid) - api_cpu) if apiserver_pid else 0.0
                row["admin"] = done[-1]
                for path in fairness:
                    env.request("DELETE", path)
                if phase != "baseline":
                    answers: dict[str, int] = {}
                    for statuses in done[:-1]:
                        for key, count in statuses.items():
                            answers[key] = answers.get(key, 0) + count
                    row["approver_answers"] = dict(sorted(answers.items()))
                    idle = cpu_seconds(server_pid)
                    await asyncio.sleep(args.idle)
                    row["server_cpu_s_after"] = cpu_seconds(server_pid) - idle
                rows.append(row)
                print(line(row), flush=True)
    return rows


def line(row: dict[str, Any]) -> str:
    text = (
        f"round {row['round']} {row['phase']:<8}: {row['creates']} tenant creates, {row['refused']} refused, "
        f"p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms; server CPU {row['server_cpu_s']:.1f} s, "
        f"apiserver CPU {row['apiserver_cpu_s']:.1f} s in {row['seconds']:.1f} s; admin {row['admin']['applies']} applies, slowest {row['admin']['max_s']:.2f} s, "
        f"{row['admin']['statuses']}"
    )
    if row["phase"] != "baseline":
        text += (
            f"; approver {row['approver_answers']}; server CPU after the approver stopped "
            f"{row['server_cpu_s_after']:.2f} s"
        )
    return text


def goals(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for row in rows:
        if row["phase"] == "baseline":
            continue
        baseline = next(r for r in rows if r["round"] == row["round"] and r["phase"] == "baseline")
        ratio = row["p99_ms"] / baseline["p99_ms"]
        admin = row["admin"]
        admin_ok = admin["max_s"] <= GOAL_ADMIN_S and set(admin["statuses"]) <= {"201"}
        met = ratio <= GOAL_RATIO and row["refused"] == 0 and admin_ok
        out.append(
            f"round {row['round']} {row['phase']}: tenants' p99 {row['p99_ms']:.1f} ms / baseline {baseline['p99_ms']:.1f} ms = "
            f"{ratio:.2f}x (goal <= {GOAL_RATIO}x), {row['refused']} refused (goal 0), admin slowest "
            f"{admin['max_s']:.2f} s / {baseline['admin']['max_s']:.2f} s without the approver (goal <= "
            f"{GOAL_ADMIN_S} s, all 201): " + ("met" if met else "NOT met")
        )
    return out


def allow_approver(env: EnvTest) -> None:
    """The approver may create GPUPolicyExceptions in its namespace, as the shipped exception-admin role lets it."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "bench-approver", "namespace": APPROVER},
        "rules": [{"apiGroups": ["gpu-webhook.io"], "resources": ["gpupolicyexceptions"], "verbs": ["create"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "bench-approver", "namespace": APPROVER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bench-approver"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": APPROVER_USER}],
    }
    for document in (role, binding):
        made = env.create(document)
        assert made.ok, (made.status, made.message)


def apply_fairness(env: EnvTest) -> list[str]:
    """manifests/components/api-fairness created; the paths to delete it again."""
    paths = []
    for document in plain_documents(FAIRNESS.read_text()):
        made = env.create(document)
        assert made.ok, (made.status, made.message)
        paths.append(
            f"/apis/flowcontrol.apiserver.k8s.io/v1/{document['kind'].lower()}s/{document['metadata']['name']}"
        )
    time.sleep(1)  # the apiserver's APF config controller picks them up
    return list(reversed(paths))


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-approver-") as scratch, contextlib.ExitStack() as stack:
        tmp = Path(scratch)
        rendered_certs, serving = serving_certs(tmp)
        pack = snapshot_rules(tmp)
        rendered = cli("manifests", "--ca", str(rendered_certs), "--rules", str(pack), "--image", IMAGE)
        full = [d for d in plain_documents(rendered) if d]
        env = stack.enter_context(EnvTest.start(apiserver_args=CLUSTER_FLAGS))
        install_crds(env)
        for namespace in (TENANT, APPROVER):
            env.create_namespace(namespace, {**TENANT_LABELS, TARGET: CONFIG}, TENANT_ANNOTATIONS)
        allow_approver(env)
        port, metrics_port = free_port(), free_port()
        child = stack.enter_context(gpu_webhook_server(CONFIG, tmp, serving, port, metrics_port, pack, env.kubeconfig))
        webhooks, _ = registration(full, CONFIG)
        env.install_webhooks(webhooks, f"https://127.0.0.1:{port}", (serving / CA_FILE).read_bytes())
        wait_until_called(env, [CONFIG], {CONFIG: TENANT})
        return asyncio.run(measure(env, child.pid, args))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=600, help="tenant creates per phase (default 600)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent tenant clients (default 4)")
    parser.add_argument("--approvers", type=int, default=3, help="concurrent approver clients (default 3)")
    parser.add_argument("--rounds", type=int, default=2, help="baseline + approver rounds (default 2)")
    parser.add_argument("--warmup", type=int, default=50, help="unmeasured tenant creates first")
    parser.add_argument(
        "--payloads",
        type=lambda text: text.split(","),
        default=["oversized", "near-bound"],
        help="what the approver sends, in turn (default oversized,near-bound)",
    )
    parser.add_argument("--admin-interval", type=float, default=2.0, help="seconds between the admin's applies")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of server CPU measured after the approver")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows, meta = run_on_envtest("bench.namespace_approver", run, args)
    for text in goals(rows):
        print(text)
    save(args.out, "approver", {"rows": rows, "meta": meta})
    return 0


if __name__ == "__main__":
    sys.exit(main())
