"""`audit --jobs N`: the same report, byte for byte, in the same order, as `--jobs 1`."""

from __future__ import annotations

import json

import pytest

from tests.audit.conftest import NS_RULES, PACK_RULES

POD = """apiVersion: v1
kind: Pod
metadata: {{name: {name}{namespace}}}
spec:
  containers:
    - name: main
      image: cuda:12
      resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}
    - name: side
      image: busybox
      env: [{{name: NVIDIA_VISIBLE_DEVICES, value: all}}]
---
"""


def _mixed(tmp_path):
    """Pods with and without namespaces, Namespace objects in a later file, broken files and notes."""
    root = tmp_path / "in"
    (root / "b").mkdir(parents=True)
    for number in range(6):
        text = "".join(
            POD.format(
                name=f"p{number}-{i}",
                namespace="" if i % 3 == 0 else f", namespace: {'locked' if i % 2 else 'open'}",
                gpus=i % 3,
            )
            for i in range(7)
        )
        (root / f"{number:02d}.yaml").write_text(text + ("just: a map\n" if number == 2 else ""))
    (root / "03-broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x\n")  # invalid YAML
    (root / "04-dup.yaml").write_text("apiVersion: v1\nkind: Pod\nkind: Pod\n")  # duplicate key
    (root / "05.json").write_text(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"}}))
    (root / "b" / "zz-namespaces.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: locked, labels: {gpu-access: none}}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: open, labels: {gpu-access: full}}\n"
    )
    return root


@pytest.mark.parametrize("output", ["json", "table"])
def test_jobs_two_writes_the_same_bytes_as_jobs_one(run, tmp_path, output):
    root = _mixed(tmp_path)
    args = [str(root), "--rules", PACK_RULES, "--rules", NS_RULES, "-o", output, "-n", "open"]
    one = run(*args, "--jobs", "1")
    two = run(*args, "--jobs", "2")
    assert one == two
    code, out, err = one
    assert code == 2  # the broken files are input problems
    assert "03-broken.yaml:4:1: invalid YAML" in err and "duplicate key 'kind'" in err
    if output == "json":
        report = json.loads(out)
        assert report["summary"]["objects"] == 6 * 7 + 1
        locked = [o for o in report["objects"] if o["namespace"] == "locked" and o["gpus"]]
        # the Namespace objects of the last file are context for every file, in both modes
        assert locked and all(
            any(r["rule"] == "no-gpu-namespaces" and r["result"] == "fail" for r in o["rules"]) for o in locked
        )
        assert any("diff" in o for o in report["objects"])  # the pack patches: diffs rendered by workers


def test_order_dependent_cluster_context_keeps_jobs_serial(run, tmp_path):
    root = _mixed(tmp_path)
    (root / "00-priority.yaml").write_text(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n"
    )
    args = [str(root), "--rules", PACK_RULES, "-o", "json"]
    assert run(*args, "--jobs", "2") == run(*args, "--jobs", "1")


@pytest.mark.parametrize("output", ["json", "yaml", "table", "policyreport", "junit", "html"])
def test_the_folded_report_is_the_same_bytes_with_jobs(run, tmp_path, monkeypatch, output):
    """Rules not evaluated (no Namespace object for `team-x`), folded in every format, and input
    problems: --jobs 2 writes what --jobs 1 writes, byte for byte."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # PolicyReport's timestamp
    root = _mixed(tmp_path)
    (root / "b" / "zz-namespaces.yaml").unlink()
    args = [str(root), "--rules", PACK_RULES, "--rules", NS_RULES, "-o", output, "-n", "team-x"]
    one = run(*args, "--jobs", "1")
    assert one == run(*args, "--jobs", "2")
    assert "not evaluated: no namespace context" in one[1] and one[0] == 2
