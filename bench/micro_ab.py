"""Before/after of the handler body in process: two checkouts, one machine, the same moments.

    python -m bench.micro_ab --before /tmp/main [--rounds 30]

Starts one worker process per checkout (this one and `--before`), each importing its own
`webhook` package and loading its own `rules/`, and hands both the same reviews (made here, by
bench/apiserver.py, with the tenant Namespace the watch cache would hold). The workers then
run `webhook.server.pipeline.decide()` (parse, context, evaluate, serialise, bookkeeping: what
`bench.micro.handler_costs` times) in short batches, taking turns, so a neighbour's burst on a
shared machine hits both alike. Per cell: the best and the median batch (thread CPU µs per
request) and their ratios; a create is one /mutate plus one /validate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = ("gpu-pod", "cpu-pod", "plain-gpu-pod")
ENDPOINTS = ("mutate", "validate")
BATCH = 100


def _serve(cases_file: str) -> None:
    """Worker: load this process's rules, then time BATCH decide() calls per line read (`workload endpoint`)."""
    from webhook.engine import Mode, Phase, load_rules
    from webhook.engine.model import DEFAULT_LIMITS
    from webhook.server.context import Snapshot
    from webhook.server.pipeline import DecideConfig, Problem, decide

    ruleset = load_rules(["rules/"]).ruleset
    if ruleset is None:
        raise SystemExit("the rules of this checkout do not load")
    cases = json.loads(Path(cases_file).read_text())
    calls: dict[tuple[str, str], Any] = {}
    for workload, found in cases.items():
        context = Snapshot("team-a", found["namespace"], {} if found["namespace"] else None, {}, {})
        for endpoint in ENDPOINTS:
            config = DecideConfig(Phase(endpoint), Mode.ENFORCE, DEFAULT_LIMITS)
            body = found[endpoint].encode()
            calls[(workload, endpoint)] = (config, body, endpoint, context.input_for)
            if isinstance(decide(ruleset, *calls[(workload, endpoint)]), Problem):
                raise SystemExit(f"{workload} /{endpoint}: not a valid review")
    print("ready", flush=True)
    for line in sys.stdin:
        workload, endpoint = line.split()
        config, body, name, context_for = calls[(workload, endpoint)]
        start = time.thread_time()
        for _ in range(BATCH):
            decide(ruleset, config, body, name, context_for)
        print((time.thread_time() - start) / BATCH * 1e6, flush=True)


def _cases() -> dict[str, dict[str, Any]]:
    from bench.reviews import bodies, namespace

    return {
        workload: {
            "namespace": None if workload.startswith("plain-") else namespace(),
            **{endpoint: bodies(workload, endpoint)[0].decode() for endpoint in ENDPOINTS},
        }
        for workload in WORKLOADS
    }


def compare(before: Path, rounds: int) -> dict[str, Any]:
    trees = {"before": before.resolve(), "after": REPO}
    with tempfile.TemporaryDirectory(prefix="micro-ab-") as tmp:
        cases = Path(tmp) / "cases.json"
        cases.write_text(json.dumps(_cases()))
        workers = {}
        for name, tree in trees.items():
            # this file runs as a script in both: each worker imports `webhook` from its own tree
            command = [sys.executable, __file__, "--serve", str(cases)]
            env = dict(os.environ, PYTHONPATH=str(tree))
            workers[name] = subprocess.Popen(
                command, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
        try:
            for name, worker in workers.items():
                assert worker.stdout is not None
                if worker.stdout.readline().strip() != "ready":
                    raise SystemExit(f"the {name} worker did not start")
            samples: dict[str, list[float]] = {}
            for workload in WORKLOADS:
                for endpoint in ENDPOINTS:
                    for turn in range(rounds):
                        for name in ("before", "after") if turn % 2 == 0 else ("after", "before"):
                            worker = workers[name]
                            assert worker.stdin is not None and worker.stdout is not None
                            worker.stdin.write(f"{workload} {endpoint}\n")
                            worker.stdin.flush()
                            samples.setdefault(f"{workload} {endpoint} {name}", []).append(
                                float(worker.stdout.readline())
                            )
        finally:
            for worker in workers.values():
                if worker.stdin is not None:
                    worker.stdin.close()
                worker.wait(30)
    return {"before": str(before), "rounds": rounds, "batch": BATCH, "loadavg": os.getloadavg(), "samples": samples}


def table(result: dict[str, Any]) -> str:
    samples = result["samples"]
    lines = [
        "| workload | call | before best | after best | after / before | before median | after median | after / before |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for workload in WORKLOADS:
        total = {"before": [0.0, 0.0], "after": [0.0, 0.0]}
        for endpoint in ENDPOINTS:
            figures = {}
            for name in ("before", "after"):
                found = samples[f"{workload} {endpoint} {name}"]
                figures[name] = (min(found), statistics.median(found))
                total[name][0] += figures[name][0]
                total[name][1] += figures[name][1]
            lines.append(_row(workload, f"/{endpoint}", figures["before"], figures["after"]))
        lines.append(_row(workload, "create", tuple(total["before"]), tuple(total["after"])))  # type: ignore[arg-type]
    return "\n".join(lines)


def _row(workload: str, call: str, before: tuple[float, float], after: tuple[float, float]) -> str:
    return (
        f"| {workload} | {call} | {before[0]:.0f} | {after[0]:.0f} | {after[0] / before[0]:.2f} | "
        f"{before[1]:.0f} | {after[1]:.0f} | {after[1] / before[1]:.2f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="the other checkout (e.g. `git worktree add /tmp/main main`)")
    parser.add_argument("--rounds", type=int, default=30, help="batches per checkout and cell (default 30)")
    parser.add_argument("--serve", metavar="CASES", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve)
        return 0
    if args.before is None:
        parser.error("--before is required")
    result = compare(args.before, args.rounds)
    print(table(result))
    print(
        f"(thread CPU µs per request, batches of {BATCH}, {args.rounds} per cell; load average at the end {result['loadavg']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
