"""Generated audit inputs with known answers: the pods of the Gatekeeper comparison, and a workload mix.

`pods(directory, count)` writes `count` Pods in multi-document YAML files and returns how many
of them break each of the two bench rules (bench/rules-two/): a GPU request that differs from
its limit (one pod in seven), and NVIDIA_VISIBLE_DEVICES in a container without a GPU limit
(one in eleven). The same files feed `gator test` with the Rego twins of the two rules, so both
tools are judged on the same objects against the same ground truth. `mix` adds Jobs,
Deployments and PyTorchJobs for the default pack, whose answers the engine alone defines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
      env: [{{name: {variable}, value: all}}]
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


@dataclass(slots=True)
class Truth:
    """What a correct audit of the generated pods reports."""

    objects: int = 0
    request_differs: int = 0  # pods breaking bench-gpu-request-equals-limit
    visible_without_gpu: int = 0  # pods breaking bench-visible-devices-needs-gpu
    denied: int = 0  # pods breaking either


def _pod(i: int, truth: Truth) -> str:
    ns, gpus = i % 37, 1 + i % 4
    differs = i % 7 == 0
    visible = i % 11 == 0  # the GPU-less sidecar sets NVIDIA_VISIBLE_DEVICES (else a harmless variable)
    truth.objects += 1
    truth.request_differs += differs
    truth.visible_without_gpu += visible
    truth.denied += differs or visible
    variable = "NVIDIA_VISIBLE_DEVICES" if visible else "LOG_LEVEL"
    return POD.format(i=i, ns=ns, gpus=gpus, req=gpus + 1 if differs else gpus, variable=variable)


def _write(directory: Path, count: int, render: Callable[[int], str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for start in range(0, count, PER_FILE):
        text = "".join(render(i) for i in range(start, min(start + PER_FILE, count)))
        (directory / f"objects-{start // PER_FILE:05d}.yaml").write_text(text)


def pods(directory: Path, count: int) -> Truth:
    truth = Truth()
    _write(directory, count, lambda i: _pod(i, truth))
    return truth


def mix(directory: Path, count: int) -> None:
    """40% pods, 30% Jobs, 20% Deployments, 10% PyTorchJobs: what the default pack audits in practice."""

    def render(i: int) -> str:
        ns, gpus, pick = i % 37, 1 + i % 4, i % 10
        if pick < 4:
            return _pod(i, Truth())
        if pick < 7:
            return JOB.format(i=i, ns=ns, gpus=gpus)
        if pick < 9:
            return DEPLOYMENT.format(i=i, ns=ns)
        return PYTORCHJOB.format(i=i, ns=ns, gpus=gpus)

    _write(directory, count, render)
