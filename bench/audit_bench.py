"""Audit throughput and memory through the real command: objects per CPU-second, wall time, peak RSS.

    python -m bench.audit_bench [--sizes 10000 100000] [--rules two pack] [--output json] [-- AUDIT-ARGS]

For each rule set and size, generated manifests (bench/audit_data.py) are audited by
`gpu-webhook audit DIR --rules R -o FORMAT` in a child process, exactly as a user runs it. The
child's own CPU time and peak RSS come from os.wait4 (that child alone, whatever else ran), so
"objects per CPU-second" is comparable with `/usr/bin/time` figures of other tools on the same
files. With the two bench rules the report's per-rule counts are checked against the
generator's ground truth: a fast wrong answer fails the run. Extra arguments after `--` go to
`audit` (e.g. `-- --jobs 2`).
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

from bench import audit_data

ROOT = Path(__file__).resolve().parents[1]
RULES = {"two": ROOT / "bench" / "rules-two", "pack": ROOT / "rules"}
TAIL = 1 << 20  # bytes of the report kept: the summary is written last


def gpu_webhook() -> str:
    local = Path(sys.executable).with_name("gpu-webhook")
    return str(local) if local.exists() else "gpu-webhook"


def run_audit(directory: Path, rules: Path, output: str, extra: list[str]) -> dict[str, object]:
    command = [gpu_webhook(), "audit", str(directory), "--rules", str(rules), "-o", output, *extra]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None
    tail = b""
    while chunk := child.stdout.read(1 << 16):
        tail = (tail + chunk)[-TAIL:]
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    stderr = child.stderr.read().decode() if child.stderr else ""
    if child.returncode not in (0, 1):
        raise SystemExit(f"audit failed ({child.returncode}): {stderr[-2000:]}")
    return {
        "tail": tail,
        "seconds": elapsed,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # KiB on Linux
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


def check_truth(summary: dict[str, object], truth: audit_data.Truth) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rules", nargs="+", choices=sorted(RULES), default=["two", "pack"])
    parser.add_argument("--output", default="json", help="report format (json is checked against ground truth)")
    parser.add_argument("audit_args", nargs="*", help="after --: extra arguments for `gpu-webhook audit`")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
        for size in args.sizes:
            directory = Path(tmp) / f"pods-{size}"
            truth = audit_data.pods(directory, size)
            megabytes = sum(f.stat().st_size for f in directory.iterdir()) / 2**20
            for name in args.rules:
                run = run_audit(directory, RULES[name], args.output, args.audit_args)
                if args.output == "json" and name == "two":
                    check_truth(summary_of(run["tail"]), truth)  # type: ignore[arg-type]
                row = {
                    "rules": name,
                    "objects": size,
                    "yaml_mib": round(megabytes, 1),
                    "seconds": round(run["seconds"], 2),  # type: ignore[call-overload]
                    "objects_per_cpu_second": round(size / run["cpu_seconds"]),  # type: ignore[operator]
                    "peak_rss_mib": round(run["peak_rss_mib"], 1),  # type: ignore[call-overload]
                    "audit_args": " ".join(args.audit_args),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
            for path in directory.iterdir():
                path.unlink()
    print("| rules | objects | wall s | objects per CPU-second | peak RSS MiB | audit args |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['rules']} | {row['objects']:,} | {row['seconds']} | {row['objects_per_cpu_second']:,} "
            f"| {row['peak_rss_mib']} | {row['audit_args']} |"
        )


if __name__ == "__main__":
    main()
