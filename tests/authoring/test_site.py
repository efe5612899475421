"""A site's overlays and exceptions beside the pack, through every offline door (--site, test PATH...),
and docs/day-two.md saying what the commands really print (issue 26)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.authoring.conftest import REPO, RULES
from webhook.export.merge import rules_of

SITE = REPO / "examples" / "site"
EXAMPLES = REPO / "examples"
DOC = REPO / "docs" / "day-two.md"
EXCEPTED = "excepted by ml-research/lora-finetune-sizing: memory sizing under measurement (ticket ML-1234)"


def fenced(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of a Markdown text, in order: (language, body)."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)


def test_the_guide_shows_the_site_as_it_is():
    blocks = [yaml.safe_load(body) for language, body in fenced(DOC.read_text()) if language == "yaml"]
    assert blocks[0] == yaml.safe_load((SITE / "overlays.yaml").read_text())
    assert blocks[1] == yaml.safe_load((SITE / "exceptions.yaml").read_text())


def test_the_guides_upgrade_check_prints_what_it_shows(tmp_path: Path):
    shutil.copytree(RULES, tmp_path / "rules")
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    text = DOC.read_text()
    section = text[text.index("## Upgrades") :]
    blocks = fenced(section)
    commands = blocks[0][1].strip().splitlines()
    assert blocks[0][0] == "sh" and blocks[1][0] == ""
    shown = blocks[1][1].strip()
    # the environment running the tests, whatever its place (as test_doc_commands.py: sys.prefix)
    gpu_webhook = str(Path(sys.prefix) / "bin" / "gpu-webhook")
    results = [
        subprocess.run(
            ["bash", "-c", command.replace(".venv/bin/gpu-webhook", gpu_webhook)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        for command in commands
    ]
    assert [r.returncode for r in results] == [0, 0, 1]
    assert results[-1].stdout.strip() == shown


def test_suites_of_the_site_run_against_the_pack_and_the_site(cli):
    code, out, _ = cli("test", "--site", str(SITE), str(SITE / "tests"))
    assert code == 0, out
    assert out.splitlines()[-1] == "4 passed, 0 failed"
    assert f"  gpu-container-resources {EXCEPTED}" in out  # a case that passes thanks to an exception says so


def test_the_packs_suites_with_the_site_fail_where_the_site_changes_the_pack(cli):
    code, out, _ = cli("test", str(RULES), str(SITE))
    assert code == 1
    failed = {line.split("::")[0].rsplit("/", 1)[-1] for line in out.splitlines() if line.endswith(" FAILED")}
    # the shipped no-label default of gpu-node-affinity, the exact affinity of two placement rules' cases,
    # the Warn of serving-readiness-probe: what examples/site changes on purpose
    assert failed == {
        "gpu-node-affinity.test.yaml",
        "mig-single-strategy-placement.test.yaml",
        "production-gpu-placement.test.yaml",
        "serving-readiness-probe.test.yaml",
    }
    assert "site.test.yaml::and denied from the moment it expires PASSED" in out


def test_a_suite_that_expects_excepted_fails_when_the_exception_is_gone(cli, tmp_path: Path):
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    site = tmp_path / "examples" / "site"
    (site / "exceptions.yaml").unlink()
    code, out, _ = cli("test", "--site", str(site), str(site / "tests"))
    assert code == 1
    assert "rule gpu-container-resources: expected excepted, got denied" in out


def test_explain_names_the_overlay_and_the_exception(cli):
    code, out, _ = cli("explain", "--site", str(SITE), "-f", str(EXAMPLES / "job-finetune.yaml"), "--no-color")
    assert code == 0, out
    assert "overlaid by site (params.gpuNode)" in out
    assert f"EXCEPTED: {EXCEPTED}" in out
    assert f"  excepted [gpu-container-resources] {EXCEPTED}" in out


def test_audit_says_excepted_in_every_format(cli):
    job = str(EXAMPLES / "job-finetune.yaml")
    for output in ("table", "json", "yaml", "policyreport", "junit", "html"):
        code, out, _ = cli("audit", "--site", str(SITE), job, "-o", output)
        assert code == 0, (output, out)
        words = " ".join(out.replace("&#x27;", "'").split())  # YAML folds long scalars
        assert EXCEPTED in words, output
    _, out, _ = cli("audit", "--site", str(SITE), job, "-o", "json")
    (entry,) = json.loads(out)["objects"]
    (rule,) = [r for r in entry["rules"] if r["rule"] == "gpu-container-resources"]
    assert rule["result"] == "excepted"
    _, out, _ = cli("audit", "--site", str(SITE), job, "-o", "table", "--summary")
    assert "1 objects: 0 denied, 0 with errors, 0 warned, 0 audited, 1 excepted, 0 passed;" in out
    assert "EXCEPTED: gpu-container-resources 1" in out
    # without the site, the same Job is denied by that rule
    code, out, _ = cli("audit", job, "-o", "json")
    assert code == 1


def test_export_keeps_an_excepted_rule_in_the_webhook_and_follows_overlays(cli, tmp_path: Path):
    site = tmp_path / "site"
    shutil.copytree(SITE, site)
    overlay = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyOverlay",
        "metadata": {"name": "warn-first"},
        # exported only when no exception can lift it (webhook.export.EXCEPTABLE)
        "spec": {"rules": [{"name": "no-node-name-in-tenants", "action": "Warn", "exceptable": False}]},
    }
    (site / "warn-first.yaml").write_text(yaml.safe_dump(overlay))
    code, out, err = cli("export", "--site", str(site), "--claims", "unresolved")
    assert code == 0, err
    # the site's exception names it, and it counts KAI Scheduler's shares: it stays with the webhook
    assert "gpu-container-resources: not exported:" in err
    actions = {  # rule -> the validationActions of the binding that holds it
        rule: d["spec"]["validationActions"]
        for d in yaml.safe_load_all(out)
        if d and d["kind"] == "ValidatingAdmissionPolicyBinding"
        for rule in rules_of(d)
    }
    assert actions["no-node-name-in-tenants"] == ["Warn"]
    assert actions["no-privileged-in-tenants"] == ["Deny"]


def test_lint_reports_stale_overlays_and_unexceptable_rules(cli, write):
    write(
        "site/stale.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicyOverlay
        metadata: {name: old-site}
        spec:
          rules:
            - {name: gpu-node-afinity, enabled: false}
        ---
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicyException
        metadata: {name: let-me, namespace: team-a}
        spec:
          rules: [no-privileged-in-tenants]
          reason: I am a tenant
        """,
    )
    site = write("site/.keep", "").parent
    code, out, _ = cli("lint", "--site", str(site))
    assert code == 1
    assert "GPUPolicyOverlay old-site: no rule named 'gpu-node-afinity' in the rules loaded (did you mean" in out
    assert "rule 'no-privileged-in-tenants' cannot be excepted (spec.exceptable: false)" in out
    assert "stale.yaml:6:" in out  # at the overlay's entry


def test_manifests_ship_the_site_beside_the_pack(cli, tmp_path: Path):
    code, out, err = cli("manifests", "--site", str(SITE), "--component", "cert-manager", "--image", "x/y:1")
    assert code == 0, err
    configmaps = [
        d for d in yaml.safe_load_all(out) if d and d["kind"] == "ConfigMap" and "overlays.yaml" in d.get("data", {})
    ]
    (configmap,) = configmaps
    assert "kind: GPUPolicyException" in configmap["data"]["exceptions.yaml"]
    assert "gpu-node-affinity.yaml" in configmap["data"]


def test_overlapping_paths_load_each_file_once(cli):
    # `test rules/ rules/site/`, `--rules rules --site rules`: a file reached twice is one file, not a duplicate rule
    code, once, _ = cli("lint", str(RULES))
    assert code == 0, once
    code, out, _ = cli("lint", str(RULES), str(RULES), "--site", str(RULES / "gpu-toleration.yaml"))
    assert code == 0, out
    assert out == once


def test_a_case_may_hold_the_clusters_exceptions(cli, write):
    write(
        "rules/rule.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicy
        metadata: {name: needs-team}
        spec:
          match: {kinds: [Pod]}
          validate: {expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"}
        """,
    )
    suite = write(
        "rules/tests/cases.test.yaml",
        """
        apiVersion: gpu-webhook.io/v1alpha1
        kind: GPUPolicyTest
        metadata: {name: cases}
        spec:
          rules: ..
          cases:
            - name: excepted by the cluster's exception
              object: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: team-a}, spec: {containers: []}}
              clusterObjects:
                - apiVersion: gpu-webhook.io/v1alpha1
                  kind: GPUPolicyException
                  metadata: {name: p-ok, namespace: team-a}
                  spec: {rules: [needs-team], reason: migration}
              expect:
                allowed: true
                rules: [{rule: needs-team, result: excepted, message: "excepted by team-a/p-ok: migration"}]
            - name: a broken one is an error of the case
              object: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: team-a}, spec: {containers: []}}
              clusterObjects:
                - {apiVersion: gpu-webhook.io/v1alpha1, kind: GPUPolicyException, metadata: {name: x, namespace: team-a}, spec: {rules: [needs-team]}}
              expect: {allowed: false}
        """,
    )
    code, out, _ = cli("test", str(suite))
    assert code == 1
    assert "cases.test.yaml::excepted by the cluster's exception PASSED" in out
    assert (
        "cannot run the case: clusterObjects[0]:1:1: GPUPolicyException team-a/x: spec: 'reason' is a required property"
        in out
    )
