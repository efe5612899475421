"""`--rules A --rules B` through every command that takes rules: the rules of both paths are used
together (a site rule beside the pack), and one line on stderr says how many and from where,
while stdout stays the command's output."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.authoring.conftest import RULES
from tests.support import SITE_RULE
from webhook.cli import main
from webhook.commands import serve
from webhook.commands.common import describe_rules
from webhook.engine import RuleSet
from webhook.export.merge import rules_of

# a GPU pod without a team label: the pack's gpu-toleration patches it, the site rule denies it
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {"containers": [{"name": "main", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}
SUITE = {
    "apiVersion": "gpu-webhook.io/v1alpha1",
    "kind": "GPUPolicyTest",
    "metadata": {"name": "site"},
    "spec": {
        "cases": [
            {
                "name": "the pack patches, the site rule denies",
                "object": POD,
                "expect": {
                    "rules": [
                        {"rule": "gpu-toleration", "result": "mutated"},
                        {"rule": "site-team-label", "result": "denied"},
                    ]
                },
            }
        ]
    },
}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    directory = tmp_path / "site"
    directory.mkdir()
    (directory / "site-team-label.yaml").write_text(SITE_RULE)
    return directory


@pytest.fixture
def pod(tmp_path: Path) -> Path:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(POD))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def both(site: Path) -> list[str]:
    return ["--rules", str(RULES), "--rules", str(site)]


def announced(err: str, count: int) -> None:
    """The one line naming the rules: their count (the pack's and the site's together) and both paths."""
    lines = [line for line in err.splitlines() if " rules from " in line]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"gpu-webhook: {count} rules from "), lines[0]
    assert "rules/ (the installed pack), " in lines[0] and lines[0].endswith("site/"), lines[0]


def test_audit(capsys: pytest.CaptureFixture[str], pack: RuleSet, site: Path, pod: Path) -> None:
    code, out, err = run(capsys, "audit", str(pod), *both(site), "-o", "json")
    assert code == 1  # the site rule denies
    (result,) = json.loads(out)["objects"]  # stdout is the report alone
    rules = {r["rule"]: r for r in result["rules"]}
    assert rules["gpu-toleration"]["patched"] and rules["site-team-label"]["result"] == "fail"
    announced(err, len(pack.rules) + 1)


def test_explain(capsys: pytest.CaptureFixture[str], pack: RuleSet, site: Path, pod: Path) -> None:
    code, out, err = run(capsys, "explain", "-f", str(pod), *both(site))
    assert code == 1
    assert "deny [site-team-label] " in out and "[gpu-toleration] add /spec/tolerations" in out
    announced(err, len(pack.rules) + 1)


def test_test(capsys: pytest.CaptureFixture[str], pack: RuleSet, site: Path) -> None:
    (site / "site.test.yaml").write_text(yaml.safe_dump(SUITE))
    code, out, err = run(capsys, "test", str(site), *both(site))
    assert code == 0, out
    assert "1 passed, 0 failed" in out
    announced(err, len(pack.rules) + 1)
    # the default for a directory is the directory alone: the pack's rule is then unknown
    code, out, _ = run(capsys, "test", str(site))
    assert code == 1 and "rule gpu-toleration: no such rule" in out


def test_test_loads_a_suite_directory_and_its_parent_once(capsys: pytest.CaptureFixture[str], pack: RuleSet) -> None:
    """The pack's suites name `rules: ..`: rules/tests/.. and rules/ are one set of rules, loaded and named once."""
    code, _, err = run(capsys, "test", str(RULES / "tests" / "gpu-toleration.test.yaml"), "--rules", str(RULES))
    assert code == 0
    assert err.count(" rules from ") == 1, err


def test_export(capsys: pytest.CaptureFixture[str], pack: RuleSet, site: Path) -> None:
    code, out, err = run(capsys, "export", *both(site), "--claims", "unresolved")
    assert code == 0
    policies = [d for d in yaml.safe_load_all(out) if d]  # stdout is the policies alone
    exported = {rule for d in policies for rule in rules_of(d)}
    kept = {line.split(": ")[1] for line in err.splitlines() if ": not exported: " in line}
    # every rule of both paths is accounted for: exported, or named as kept by the webhook
    assert exported | kept == {rule.name for rule in pack.rules} | {"site-team-label"}
    announced(err, len(pack.rules) + 1)


def test_serve_logs_the_rules_as_a_structured_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    pack: RuleSet,
    site: Path,
    tmp_path: Path,
) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))  # logs.configure replaces them
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.setattr(serve, "_runner", lambda loop: lambda coroutine: coroutine.close())  # built, not run
    argv = ["serve", *both(site), "--cert-dir", str(tmp_path / "certs"), "--port", "0", "--namespaces", "off"]
    code, out, err = run(capsys, *argv)
    assert code == 0 and out == ""
    entries = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    (entry,) = [e for e in entries if e.get("sources")]
    assert entry["rules"] == len(pack.rules) + 1 and entry["sources"] == [str(RULES), str(site)]
    assert entry["msg"] == describe_rules(len(pack.rules) + 1, [str(RULES), str(site)])
    assert not [line for line in err.splitlines() if line.startswith("gpu-webhook: ") and "rules from" in line]


def test_the_line_names_the_default_the_installed_pack(
    capsys: pytest.CaptureFixture[str], pack: RuleSet, pod: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPU_WEBHOOK_RULES", raising=False)
    monkeypatch.chdir(RULES.parent)
    _, _, err = run(capsys, "audit", str(pod), "-o", "json")
    assert f"gpu-webhook: {len(pack.rules)} rules from rules/ (the installed pack)\n" in err


def test_one_rule_file_is_one_rule(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(site.parent)
    assert describe_rules(1, [str(site / "site-team-label.yaml")]) == "1 rule from site/site-team-label.yaml"
