"""Audit throughput and memory: generated manifests on disk -> `gpu-webhook audit` pipeline.

    python bench/audit_bench.py [--sizes 10000 100000] [--output json]

For each size, a fresh child process audits that many generated objects (Pods, Jobs,
Deployments and PyTorchJobs; some break rules, most get patched) from multi-document YAML
files, through the same code as the command (read_manifests -> audit -> Tally -> report
written to /dev/null). The child reports objects/s (one process: one core) and its peak RSS
from resource.getrusage; equal RSS at 10k and 100k objects shows that memory stays flat.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PER_FILE = 1000

POD = """apiVersion: v1
kind: Pod
metadata:
  name: pod-{i}
  namespace: team-{ns}
  labels: {{app: bench, team: t{ns}}}
spec:
  containers:
    - name: main
      image: nvcr.io/nvidia/pytorch:24.05-py3
      resources:
        requests: {{cpu: "4", memory: 16Gi, nvidia.com/gpu: {req}}}
        limits: {{memory: 16Gi, nvidia.com/gpu: {gpus}}}
    - name: sidecar
      image: busybox
      env: [{{name: NVIDIA_VISIBLE_DEVICES, value: {visible}}}]
---
"""
JOB = """apiVersion: batch/v1
kind: Job
metadata: {{name: job-{i}, namespace: team-{ns}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: cuda:12
          resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}
---
"""
DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {{name: web-{i}, namespace: team-{ns}}}
spec:
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: web, image: nginx, resources: {{requests: {{cpu: 100m}}}}}}]
---
"""
PYTORCHJOB = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: llm-{i}, namespace: team-{ns}}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{{name: pytorch, image: torch, resources: {{limits: {{nvidia.com/gpu: 8}}}}}}]
    Worker:
      replicas: 3
      template:
        spec:
          containers: [{{name: pytorch, image: torch, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]
---
"""


def generate(directory: Path, count: int) -> None:
    """count objects in files of PER_FILE documents; 40% pods, 30% jobs, 20% deployments, 10% PyTorchJobs."""
    directory.mkdir(parents=True, exist_ok=True)
    for start in range(0, count, PER_FILE):
        parts = []
        for i in range(start, min(start + PER_FILE, count)):
            ns, gpus, pick = i % 37, 1 + i % 4, i % 10
            if pick < 4:
                req = gpus if i % 7 else gpus + 1  # one pod in seven asks for more than its limit
                visible = "void" if i % 11 else "all"
                parts.append(POD.format(i=i, ns=ns, gpus=gpus, req=req, visible=visible))
            elif pick < 7:
                parts.append(JOB.format(i=i, ns=ns, gpus=gpus))
            elif pick < 9:
                parts.append(DEPLOYMENT.format(i=i, ns=ns))
            else:
                parts.append(PYTORCHJOB.format(i=i, ns=ns, gpus=gpus))
        (directory / f"objects-{start // PER_FILE:05d}.yaml").write_text("".join(parts))


def child(directory: str, output: str) -> None:
    """Run in a fresh process so that ru_maxrss is this size's peak alone."""
    sys.path.insert(0, str(ROOT))
    from webhook.audit import Tally, audit, read_manifests
    from webhook.audit.formats import make_report
    from webhook.commands.common import load_ruleset

    ruleset = load_ruleset([str(ROOT / "rules")])
    actions = {rule.name: rule.action for rule in ruleset.rules}
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(os.devnull, "w") as sink:
        report = make_report(output, sink, actions, details=False)
        tally = Tally()
        started, cpu_started = time.perf_counter(), time.process_time()
        for result in audit(ruleset, read_manifests([directory])):
            tally.add(result)
            report.add(result)
        report.finish(tally)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(
        json.dumps(
            {
                "objects": tally.objects,
                "seconds": round(elapsed, 2),
                "objects_per_second": round(tally.objects / elapsed),
                "objects_per_cpu_second": round(tally.objects / cpu),
                "peak_rss_mib": round(peak / 1024, 1),
                "rss_after_loading_rules_mib": round(baseline / 1024, 1),
                "denied_objects": tally.objects_by_worst["fail"],
                "patched_objects": tally.patched_objects,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--output", default="table", help="report format written to /dev/null (table, json, ...)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.output)
        return
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
        for size in args.sizes:
            directory = Path(tmp) / str(size)
            generate(directory, size)
            megabytes = sum(f.stat().st_size for f in directory.iterdir()) / 2**20
            run = subprocess.run(
                [sys.executable, __file__, "--child", str(directory), "--output", args.output],
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(run.stdout)
            print(f"{size:>7} objects ({megabytes:.0f} MiB of YAML, -o {args.output}): {json.dumps(result)}")


if __name__ == "__main__":
    main()
