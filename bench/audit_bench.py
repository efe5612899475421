"""Audit throughput and memory through the real command: objects per CPU-second, wall time, peak RSS.

    python -m bench.audit_bench [--sizes 10000 100000] [--rules two pack pack-ns] [--jobs 1 2] [--repeat 3]
        [--cluster [--cluster-rules two]] [--no-diff] [--baseline SRC] [--big 1000000] [--output json] [-- AUDIT-ARGS]

For each rule set and size, generated manifests (bench/manifests.py) are audited by
`gpu-webhook audit DIR --rules R -o FORMAT` in a child process, exactly as a user runs it. The
child's own CPU time and peak RSS come from os.wait4 in bench/audit_launch.py (that child alone,
whatever else ran, and not the RSS of the benchmark that started it), so
"objects per CPU-second" is comparable with `/usr/bin/time` figures of other tools on the same
files. With the two bench rules the report's per-rule counts are checked against the
generator's ground truth: a fast wrong answer fails the run. `pack-ns` is the pack with the
pods' 37 Namespace objects in the input (labelled and annotated as docs/operations.md's tenant
namespace, as bench.apiserver_path makes them), so every rule is evaluated; `pack` has none, so
most of the pack reports "not evaluated". Extra arguments after `--` go to `audit`.

`--repeat 3` runs every row three times, this tree and the baseline alternating, and reports
the median objects per CPU-second with the three figures beside it.

`--jobs 1 2` runs each case once per job count (wall time is what --jobs buys; CPU time covers
the worker processes too, as wait4 reports reaped grandchildren; peak RSS is the largest
process). `--no-diff` adds a pack row without diffs. `--cluster` also audits the same pods
through `audit --cluster` against the stand-in API server (tests/support/apistub.py, in this
process; the child's CPU is the client's alone). `--baseline SRC` adds rows for another
source tree of the `webhook` package (e.g. `git archive <commit> webhook | tar -x -C SRC`),
run with this interpreter, so that before/after ratios come from one run on one machine; a
`rules/` directory in SRC is the pack its rows use (its engine reads its own pack's fields), and
`--same-pack` adds rows of this tree with that pack: the ratio of the code alone.
`--big 1000000` runs that size first, with the two rules and this code only (memory must stay
flat: the peak RSS column shows it).
Children run without PYTHONDONTWRITEBYTECODE and PYTHONUNBUFFERED, as an installed package runs
(with bytecode, stdout buffered).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support import manifests

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "bench" / "audit_launch.py"
RULES = {"two": ROOT / "bench" / "rules-two", "pack": ROOT / "rules", "pack-ns": ROOT / "rules"}
SAME_PACK = "this tree, baseline's pack"
NAMESPACES = 37  # tests/support/manifests.py puts pod i in team-{i % 37}


def write_namespaces(directory: Path) -> Path:
    """The generated pods' Namespace objects, each a tenant namespace of docs/operations.md."""
    from bench.apiserver_path import TENANT_ANNOTATIONS, TENANT_LABELS

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "namespaces.yaml"
    documents = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": f"team-{n}",
                "labels": {**TENANT_LABELS, "team": f"t{n}"},
                "annotations": TENANT_ANNOTATIONS,
            },
        }
        for n in range(NAMESPACES)
    ]
    path.write_text("---\n".join(json.dumps(d) + "\n" for d in documents))
    return directory


TAIL = 1 << 20  # bytes of the report kept: the summary is written last


def child_env() -> dict[str, str]:
    """The environment an audit runs in as a user runs it: with bytecode, and stdout buffered
    (PYTHONUNBUFFERED, set in some shells and CI images, makes every write a system call)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")}


def run_audit(inputs: list[str], rules: Path, output: str, extra: list[str], source: str | None) -> dict[str, object]:
    command = [sys.executable, "-m", "webhook.cli", "audit", *inputs, "--rules", str(rules), "-o", output, *extra]
    command = [sys.executable, str(LAUNCHER), *command]  # CPU and peak RSS of the audit alone
    env = child_env()
    if source:
        env["PYTHONPATH"] = source  # ahead of the editable install: that tree's `webhook` runs
    started = time.perf_counter()
    # `-m` puts the working directory first on sys.path: the tree whose code is measured
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=source or ROOT)
    assert child.stdout is not None
    tail = b""
    while chunk := child.stdout.read(1 << 16):
        tail = (tail + chunk)[-TAIL:]
    child.wait()
    elapsed = time.perf_counter() - started
    stderr = child.stderr.read().decode() if child.stderr else ""
    if child.returncode not in (0, 1):
        raise SystemExit(f"audit failed ({child.returncode}): {stderr[-2000:]}")
    usage = json.loads(stderr.rstrip().rpartition("\n")[2])
    return {
        "tail": tail,
        "seconds": elapsed,
        "cpu_seconds": usage["cpu_seconds"],
        "peak_rss_mib": usage["peak_rss_mib"],
    }


def summary_of(tail: bytes) -> dict[str, object]:
    """The `summary` object of a JSON report, from the report's last bytes."""
    text = tail.decode(errors="replace")
    start = text.rfind('"summary":')
    if start < 0:
        raise SystemExit("no summary in the audit report")
    decoder = json.JSONDecoder()
    value, _ = decoder.raw_decode(text, start + len('"summary":'))
    return value


def check_truth(summary: dict[str, object], truth: manifests.Truth) -> None:
    rules = summary["rules"]
    assert isinstance(rules, dict)
    found = {
        "objects": summary["objects"],
        "request_differs": rules.get("bench-gpu-request-equals-limit", {}).get("fail", 0),
        "visible_without_gpu": rules.get("bench-visible-devices-needs-gpu", {}).get("fail", 0),
    }
    wanted = {
        "objects": truth.objects,
        "request_differs": truth.request_differs,
        "visible_without_gpu": truth.visible_without_gpu,
    }
    if found != wanted:
        raise SystemExit(f"wrong answers: audit reported {found}, ground truth is {wanted}")


def _stub_with_pods(directory: Path) -> Any:
    """The stand-in API server holding the generated pods (read with audit's own loader)."""
    from tests.support.apistub import ApiStub
    from webhook.audit.sources import read_manifests

    api = ApiStub()
    for item in read_manifests([str(directory)]):
        api.add(item.object)
    return api


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rules", nargs="+", choices=sorted(RULES), default=["two", "pack", "pack-ns"])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1], help="audit --jobs values to run")
    parser.add_argument("--no-diff", action="store_true", help="add a pack row with --no-diff")
    parser.add_argument("--cluster", action="store_true", help="add rows read through audit --cluster")
    parser.add_argument("--cluster-rules", nargs="+", choices=sorted(RULES), help="rule sets for --cluster rows")
    parser.add_argument("--baseline", metavar="SRC", help="also run the webhook package found in SRC")
    parser.add_argument(
        "--big",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="also these sizes, `two` rules and this code only (each --jobs value): e.g. 1000000",
    )
    parser.add_argument("--output", default="json", help="report format (json is checked against ground truth)")
    parser.add_argument(
        "--same-pack",
        action="store_true",
        help="with --baseline: also this tree with the baseline's rules/ (the code's ratio)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per row (this tree and the baseline alternate); the median"
    )
    parser.add_argument("audit_args", nargs="*", help="after --: extra arguments for `gpu-webhook audit`")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []

    def measure(
        code: str,
        name: str,
        size: int,
        megabytes: float,
        inputs: list[str],
        extra: list[str],
        truth: manifests.Truth,
        source: str | None,
    ) -> None:
        if name == "pack-ns" and "--cluster" not in extra:
            inputs = [str(write_namespaces(Path(tmp) / "namespaces")), *inputs]
        rules = RULES[name]
        pack_from = args.baseline if code == SAME_PACK else source
        if pack_from and name != "two" and (Path(pack_from) / "rules").is_dir():
            rules = Path(pack_from) / "rules"  # that tree's own pack, which its engine reads
        if code == SAME_PACK and name == "two":
            return  # the same rows as "this tree"
        run = run_audit(inputs, rules, args.output, [*extra, *args.audit_args], source)
        if args.output == "json" and name == "two":
            check_truth(summary_of(run["tail"]), truth)  # type: ignore[arg-type]
        row: dict[str, Any] = {
            "code": code,
            "rules": name,
            "objects": size,
            "yaml_mib": round(megabytes, 1),
            "seconds": round(run["seconds"], 2),  # type: ignore[call-overload]
            "objects_per_cpu_second": round(size / run["cpu_seconds"]),  # type: ignore[operator]
            "peak_rss_mib": round(run["peak_rss_mib"], 1),  # type: ignore[call-overload]
            "audit_args": " ".join([*extra, *args.audit_args]),
        }
        key = (code, name, size, row["audit_args"])
        runs = previous.setdefault(key, [])
        runs.append(row)
        print(json.dumps(row), flush=True)
        if len(runs) == args.repeat:  # the median run by objects per CPU-second, with every figure
            ranked = sorted(runs, key=lambda r: r["objects_per_cpu_second"])
            median = dict(ranked[len(ranked) // 2])
            median["runs"] = " / ".join(f"{r['objects_per_cpu_second']:,}" for r in runs)
            rows.append(median)

    previous: dict[tuple[object, ...], list[dict[str, Any]]] = {}

    codes = [("this tree", None)] + ([("baseline", args.baseline)] if args.baseline else [])
    if args.same_pack and args.baseline:
        codes.insert(1, (SAME_PACK, None))
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
        for size in args.big:
            directory = Path(tmp) / f"pods-{size}"
            truth = manifests.pods(directory, size)
            megabytes = sum(f.stat().st_size for f in directory.iterdir()) / 2**20
            for jobs in args.jobs:
                measure("this tree", "two", size, megabytes, [str(directory)], ["--jobs", str(jobs)], truth, None)
            for path in directory.iterdir():
                path.unlink()
        for size in args.sizes:
            directory = Path(tmp) / f"pods-{size}"
            truth = manifests.pods(directory, size)
            megabytes = sum(f.stat().st_size for f in directory.iterdir()) / 2**20
            for _ in range(args.repeat):
                for name in args.rules:
                    for code, source in codes:
                        for jobs in args.jobs if code == "this tree" else [1]:
                            extra = ["--jobs", str(jobs)] if code == "this tree" else []
                            measure(code, name, size, megabytes, [str(directory)], extra, truth, source)
                    if name == "pack" and args.no_diff:
                        measure("this tree", name, size, megabytes, [str(directory)], ["--no-diff"], truth, None)
            if args.cluster:
                api = _stub_with_pods(directory)
                with api.running():
                    kubeconfig = api.kubeconfig(Path(tmp) / "kubeconfig")
                    for _ in range(args.repeat):
                        for name in args.cluster_rules or args.rules:
                            for code, source in codes:
                                extra = ["--cluster", "--kubeconfig", str(kubeconfig)]
                                measure(code, name, size, megabytes, [], extra, truth, source)
                del api
            for path in directory.iterdir():
                path.unlink()
    print("| code | rules | objects | audit args | wall s | objects per CPU-second | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        arguments = str(row["audit_args"]).replace(f" --kubeconfig {Path(tmp) / 'kubeconfig'}", "")
        runs = f" ({row['runs']})" if args.repeat > 1 else ""
        print(
            f"| {row['code']} | {row['rules']} | {row['objects']:,} | {arguments} | {row['seconds']} "
            f"| {row['objects_per_cpu_second']:,}{runs} | {row['peak_rss_mib']} |"
        )


if __name__ == "__main__":
    main()
