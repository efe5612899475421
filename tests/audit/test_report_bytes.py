"""Every report format, byte for byte, against what the audit wrote before its speed work (issue 15).

The corpus mixes what the fast paths must not change: the bench's pods, Jobs, Deployments and
PyTorchJobs (tests/support/manifests.py, varied) and a List through rapidyaml; files that take the libyaml path (YAML 1.1 words, octals, anchors, a
timestamp, a quoted number); a JSON file; Namespace objects as context; objects without a
namespace, with a uid, with generateName, cluster-scoped ones; skipped documents (notes) and
broken files (problems). The expected reports in fixtures/report-bytes/ were written by the
audit at 3f47258 (before issue 15's round 4 changes) with

    GPU_WEBHOOK_RECORD=1 .venv/bin/python -m pytest tests/audit/test_report_bytes.py

and are compared as they are: a change of one byte in any format fails here.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.audit.conftest import EXTRA_RULES, NS_RULES, PACK_RULES
from tests.support.manifests import DEPLOYMENT, JOB, POD, PYTORCHJOB

EXPECTED = Path(__file__).parent / "fixtures" / "report-bytes"
RECORD = bool(os.environ.get("GPU_WEBHOOK_RECORD"))

# the libyaml path: YAML 1.1 words, an octal, an anchor and alias, a timestamp, a quoted "yes"
OLD_STYLE = """apiVersion: v1
kind: Pod
metadata:
  name: old-style
  namespace: locked
  labels: {enabled: yes, mode: 0644, since: 2024-01-01, quoted: "yes", gpu: &g 2}
  annotations: {note: "caf\\u00e9 \\u2713"}
spec:
  containers:
    - name: main
      image: cuda:12
      resources: {limits: {nvidia.com/gpu: *g}, requests: {nvidia.com/gpu: 1}}
"""
NAMESPACES = """apiVersion: v1
kind: Namespace
metadata: {name: locked, labels: {gpu-access: none}}
---
apiVersion: v1
kind: Namespace
metadata: {name: open, labels: {gpu-access: full}}
"""
MISC = """apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Pod
    metadata: {name: listed, namespace: open}
    spec: {containers: [{name: c, image: busybox, env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]}]}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: admission.k8s.io/v1
kind: AdmissionReview
request: {uid: x}
---
just: a map
---
"""


def corpus(root: Path) -> None:
    """The bench's own templates (tests/support/manifests.py), moved to the namespaces of NS_RULES and varied."""
    root.mkdir(parents=True)
    places = ("", "open", "locked", "team-7")
    pods = []
    for i in range(16):
        differs, visible, gpus = i % 7 == 0, i % 5 == 0, i % 4
        pod = POD.format(
            i=i,
            ns=i,
            gpus=gpus,
            req=gpus + 1 if differs else gpus,
            variable="NVIDIA_VISIBLE_DEVICES" if visible else "LOG",
        )
        place = places[i % 4]  # none: -n open gives it one, as kubectl apply -n does
        pods.append(pod.replace(f"  namespace: team-{i}\n", f"  namespace: {place}\n" if place else ""))
    (root / "10-pods.yaml").write_text("".join(pods))
    mixed = []
    for i in range(9):
        template = (JOB, DEPLOYMENT, PYTORCHJOB)[i % 3].format(i=i, ns=i, gpus=i % 5)
        template = template.replace(f"namespace: team-{i}", f"namespace: {places[1 + i % 3]}")
        # a Kueue queue label on Jobs, a uid on Deployments, generateName on PyTorchJobs
        template = template.replace(
            f"{{name: job-{i},", f"{{labels: {{kueue.x-k8s.io/queue-name: q{i}}}, name: job-{i},"
        )
        template = template.replace(f"{{name: web-{i},", f"{{uid: u-{i}, name: web-{i},")
        mixed.append(template.replace(f"{{name: llm-{i},", "{generateName: llm-,"))
    (root / "20-workloads.yaml").write_text("".join(mixed))
    (root / "30-old-style.yaml").write_text(OLD_STYLE)
    (root / "40-misc.yaml").write_text(MISC)
    (root / "50-deployment.json").write_text(
        json.dumps(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "serve", "namespace": "open"},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "c", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": 2}}}
                            ]
                        }
                    }
                },
            }
        )
    )
    (root / "60-broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x\n")
    (root / "70-dup.yaml").write_text("apiVersion: v1\nkind: Pod\nkind: Pod\n")
    (root / "zz-namespaces.yaml").write_text(NAMESPACES)


CASES = {
    "table": ("-o", "table"),
    "table-summary": ("-o", "table", "--summary"),
    "json": ("-o", "json"),
    "json-no-diff": ("-o", "json", "--no-diff"),
    "yaml": ("-o", "yaml"),
    "policyreport": ("-o", "policyreport"),
    "junit": ("-o", "junit"),
    "html": ("-o", "html"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_report_bytes_are_unchanged(run, tmp_path, monkeypatch, case):
    corpus(tmp_path / "in")
    monkeypatch.chdir(tmp_path)  # origins are relative paths, the same on every machine
    monkeypatch.setattr("time.time", lambda: 1_700_000_000.0)  # the PolicyReports' timestamp
    rules = ("--rules", PACK_RULES, "--rules", EXTRA_RULES, "--rules", NS_RULES)
    code, out, err = run("in", *rules, *CASES[case], "-n", "open")
    # the line naming the rules in use holds this machine's paths: checked, then left out of the bytes
    used, _, err = err.partition("\n")
    assert re.fullmatch(r"gpu-webhook: \d+ rules from .*rules/ \(the installed pack\), .*", used), used
    got = f"exit {code}\n--- stderr\n{err}--- stdout\n{out}"
    expected = EXPECTED / f"{case}.txt"
    if RECORD:
        expected.parent.mkdir(exist_ok=True)
        expected.write_text(got)
    assert got == expected.read_text()
    if case == "json":
        assert code == 2 and re.search(r"60-broken.yaml:4:1: invalid YAML", err)  # the corpus is what it says
        report = json.loads(out)
        kinds = {o["kind"] for o in report["objects"]}
        assert kinds >= {"Pod", "Job", "Deployment", "PyTorchJob"}
        assert "PriorityClass" not in kinds  # context for what follows, as in the cluster: not an audited object
        assert any("diff" in o for o in report["objects"])


def test_jobs_two_writes_the_expected_bytes(run, tmp_path, monkeypatch):
    """--jobs 2 on the corpus without its order-dependent PriorityClass: the same bytes as --jobs 1."""
    corpus(tmp_path / "in")
    misc = tmp_path / "in" / "40-misc.yaml"
    misc.write_text(misc.read_text().replace("kind: PriorityClass", "kind: ConfigMap"))
    monkeypatch.chdir(tmp_path)
    rules = ("--rules", PACK_RULES, "--rules", NS_RULES)
    one = run("in", *rules, "-o", "json", "-n", "open", "--jobs", "1")
    two = run("in", *rules, "-o", "json", "-n", "open", "--jobs", "2")
    assert one == two
