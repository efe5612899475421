"""`gpu-webhook export` as a user runs it: a YAML file of policies, and one stderr line per rule left out."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support import RULES

CLI = [sys.executable, "-m", "webhook.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "export", *args], capture_output=True, text=True, timeout=120, check=False)


def test_writes_policies_and_names_every_rule_left_out(tmp_path: Path) -> None:
    out = tmp_path / "native.yaml"
    done = run("--rules", str(RULES), "-o", str(out))
    assert done.returncode == 0, done.stderr
    documents = [d for d in yaml.safe_load_all(out.read_text()) if d]
    kinds = {d["kind"] for d in documents}
    assert kinds == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
    exported = {d["metadata"]["labels"]["gpu-webhook.io/rule"] for d in documents}
    refused = {line.split(": ")[1] for line in done.stderr.splitlines() if "not exported" in line}
    rule_names = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in RULES.glob("*.yaml")}
    assert exported | refused == rule_names and not exported & refused  # none dropped silently
    assert "&id" not in out.read_text()  # plain YAML, no anchors


def test_target_vap_names_the_mutating_rules(tmp_path: Path) -> None:
    done = run("--rules", str(RULES), "--target", "vap")
    assert done.returncode == 0
    assert "gpu-toleration: not exported: mutates, and --target vap exports validation only" in done.stderr
    assert {d["kind"] for d in yaml.safe_load_all(done.stdout) if d} == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }


def test_old_release_keeps_mutations_in_the_webhook() -> None:
    done = run("--rules", str(RULES), "--kubernetes-version", "1.31")
    assert done.returncode == 0
    assert "no MutatingAdmissionPolicy (1.32+)" in done.stderr
    beta = run("--rules", str(RULES), "--kubernetes-version", "1.34")
    assert "feature gate" in beta.stderr and "admissionregistration.k8s.io/v1beta1" in beta.stdout


def test_usage_errors_exit_2_without_a_traceback(tmp_path: Path) -> None:
    for args in (["--kubernetes-version", "one"], ["--kubernetes-version", "1.29"], ["--rules", str(tmp_path / "x")]):
        done = run(*args)
        assert done.returncode == 2, args
        assert "Traceback" not in done.stderr and done.stderr.startswith("gpu-webhook:")


def test_a_rule_the_apiserver_cannot_run_is_refused_with_its_reason(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules, ignore=shutil.ignore_patterns("tests"))
    (rules / "any-kind.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: any-kind}\n"
        "spec:\n  match: {kinds: ['*']}\n  validate: {expression: 'true'}\n"
    )
    done = run("--rules", str(rules))
    assert "any-kind: not exported: matches every kind" in done.stderr


def test_table_lists_every_rule_as_docs_native_shows_it() -> None:
    done = run("--rules", str(RULES), "--table")
    assert done.returncode == 0
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| rule")]
    rule_names = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in RULES.glob("*.yaml")}
    assert {row.split(" | ")[0][2:] for row in rows} == rule_names
