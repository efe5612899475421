"""`gpu-webhook export` as a user runs it: a YAML file of policies, and one stderr line per rule left out.

One run goes through a real process (the installed entry point's module); the others call the
same `main()` in-process, which keeps this file fast on a loaded machine.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.export.equivalence import EXTRA_RULES
from tests.export.native_site import overlay_text
from tests.support import RULES
from webhook.cli import main
from webhook.export.merge import rules_of

CLI = [sys.executable, "-m", "webhook.cli"]


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pack plus the test-only mutating rules (every mutating rule of the pack is refused), none
    exceptable: the site's GPUPolicyOverlay that docs/native.md describes (tests/export/native_site.py)."""
    out = tmp_path_factory.mktemp("rules")
    shutil.copytree(RULES, out, ignore=shutil.ignore_patterns("tests"), dirs_exist_ok=True)
    for path in EXTRA_RULES.glob("*.yaml"):
        shutil.copy(path, out / path.name)
    (out / "zz-native-site.yaml").write_text(overlay_text(_names(out)))
    return out


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["export", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _names(rules: Path) -> set[str]:
    """The rules of a directory (each file holds one GPUPolicy), the site's overlay aside."""
    documents = [yaml.safe_load(p.read_text()) for p in rules.glob("*.yaml")]
    return {d["metadata"]["name"] for d in documents if d["kind"] == "GPUPolicy"}


def test_writes_policies_and_names_every_rule_left_out(tmp_path: Path, rules: Path) -> None:
    out = tmp_path / "native.yaml"
    done = subprocess.run(
        [*CLI, "export", "--rules", str(rules), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    documents = [d for d in yaml.safe_load_all(out.read_text()) if d]
    kinds = {d["kind"] for d in documents}
    assert kinds == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
    exported = {rule for d in documents for rule in rules_of(d)}
    refused = {line.split(": ")[1] for line in done.stderr.splitlines() if "not exported" in line}
    assert exported | refused == _names(rules) and not exported & refused  # none dropped silently
    assert "&id" not in out.read_text()  # plain YAML, no anchors
    # a Deny rule whose ratcheting on UPDATE is not modelled is exported for CREATE only, and says so
    assert "cpu-limit-required: exported CREATE only" in done.stderr
    assert "no-privileged-in-tenants: exported" not in done.stderr  # its ratcheting is modelled
    assert "gpu-toleration: not exported: gpu: true depends on the pod's DRA claims" in done.stderr
    assert "priority-class-allowed: not exported: reads defaultPriorityClass" in done.stderr


def test_target_vap_names_the_mutating_rules(capsys: pytest.CaptureFixture[str], rules: Path) -> None:
    code, out, err = run(capsys, "--rules", str(rules), "--target", "vap")
    assert code == 0
    assert "tenant-placement: not exported: mutates, and --target vap exports validation only" in err
    assert {d["kind"] for d in yaml.safe_load_all(out) if d} == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }


def test_old_release_keeps_mutations_in_the_webhook(capsys: pytest.CaptureFixture[str], rules: Path) -> None:
    code, _, err = run(capsys, "--rules", str(rules), "--kubernetes-version", "1.31")
    assert code == 0
    assert "has no MutatingAdmissionPolicy: the webhook keeps the rule (on 1.32 or later" in err
    _, out, err = run(capsys, "--rules", str(rules), "--kubernetes-version", "1.34")
    assert "feature gate" in err and "admissionregistration.k8s.io/v1beta1" in out


def test_usage_errors_exit_2_without_a_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for args in (["--kubernetes-version", "one"], ["--kubernetes-version", "1.29"], ["--rules", str(tmp_path / "x")]):
        code, _, err = run(capsys, *args)
        assert code == 2, args
        assert "Traceback" not in err and err.startswith("gpu-webhook:")


def test_a_rule_the_apiserver_cannot_run_is_refused_with_its_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "any-kind.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: any-kind}\n"
        "spec:\n  match: {kinds: ['*']}\n  validate: {expression: 'true'}\n"
    )
    (tmp_path / "by-vendor.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: by-vendor}\n"
        "spec:\n  match: {kinds: [Pod], operations: [CREATE]}\n  mutate:\n"
        "    - addToleration: {byResourcePrefix: [{prefix: amd.com/, key: amd.com/gpu, operator: Exists}]}\n"
    )
    _, _, err = run(capsys, "--rules", str(tmp_path))
    assert "any-kind: not exported: matches every kind" in err
    assert "by-vendor: not exported: mutation addToleration: byResourcePrefix" in err


def test_table_lists_every_rule_as_docs_native_shows_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--rules", str(RULES), "--table")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| rule")]
    assert {row.split(" | ")[0][2:] for row in rows} == _names(RULES)
    docs = (RULES.parent / "docs" / "native.md").read_text()
    assert out in docs, "docs/native.md's table is stale: regenerate it with `gpu-webhook export --table`"


def test_claims_unresolved_exports_counting_rules_and_its_table_is_in_docs_native(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, _, err = run(capsys, "--rules", str(RULES))
    assert "gpu-per-pod-ceiling: not exported: gpu: true depends on the pod's DRA claims" in err
    assert "`--claims unresolved` exports it" in err
    code, out, err = run(capsys, "--rules", str(RULES), "--claims", "unresolved", "--table")
    assert code == 0
    # the shipped KAI Scheduler allocator counts GPUs the exported CEL cannot: the counting rules stay
    assert "| gpu-per-pod-ceiling | **no** | **yes** | — | — | — | its accelerator count includes the GPUs of" in out
    assert "| priority-class-allowed | **no** |" in out  # reads cluster context: refused in both modes
    assert "DRA claims" not in out
    docs = (RULES.parent / "docs" / "native.md").read_text()
    assert out in docs, (
        "docs/native.md's --claims unresolved table is stale: `gpu-webhook export --claims unresolved --table`"
    )


def test_a_rule_exceptions_may_lift_is_kept_by_the_webhook_with_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The pack as shipped: rules that translate but are exceptable stay with the webhook, each named
    on stderr and in one warning; a site's overlay with exceptable: false exports the one it names."""
    code, out, err = run(capsys, "--rules", str(RULES))
    assert code == 0
    assert "no-node-name-in-tenants: not exported: a GPUPolicyException may lift it (spec.exceptable: true)" in err
    (warning,) = [line for line in err.splitlines() if "warning:" in line]
    assert "rules would export but stay with the webhook because a GPUPolicyException may lift them" in warning
    assert "no-node-name-in-tenants" in warning and "no-privileged-in-tenants" not in warning  # not exceptable
    assert "[no-node-name-in-tenants]" not in out and "[no-privileged-in-tenants]" in out
    # --table says so too, and the warning stays
    code, table, err = run(capsys, "--rules", str(RULES), "--table")
    assert "| no-node-name-in-tenants | **no** | **yes** |" in table and "warning:" in err
    assert "| no-privileged-in-tenants | yes | no |" in table

    site = tmp_path / "site"
    site.mkdir()
    (site / "native.yaml").write_text(overlay_text(["no-node-name-in-tenants"]))
    code, out, err = run(capsys, "--rules", str(RULES), "--rules", str(site))
    assert code == 0 and "[no-node-name-in-tenants]" in out
    assert "no-node-name-in-tenants: not exported" not in err


def test_an_unknown_claims_mode_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(capsys, "--claims", "resolve")
    _, err = capsys.readouterr()
    assert exit_.value.code == 2 and "--claims" in err and "Traceback" not in err
