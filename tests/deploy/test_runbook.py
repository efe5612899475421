"""The outage runbook (webhook/install/runbook.py): generated from the registration's entries, printed by
`gpu-webhook manifests --runbook`, and shown as is in docs/operations.md §6. The real apiserver runs it in
tests/e2e/test_runbook.py."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tests.support import REPO
from webhook.cli import main
from webhook.engine import RuleSet
from webhook.install.registration import ENTRIES, MUTATING, VALIDATING, configurations
from webhook.install.runbook import CLOSED, OPEN, commands, runbook

DOC = REPO / "docs" / "operations.md"


def documented() -> str:
    found = re.search(r"<!-- BEGIN RUNBOOK[^\n]*-->\n(.*?)<!-- END RUNBOOK -->", DOC.read_text(), flags=re.S)
    assert found, "docs/operations.md has no generated runbook between its markers"
    return found.group(1)


def test_the_doc_shows_the_generated_runbook() -> None:
    assert documented() == runbook(), "docs/operations.md §6 is stale: paste `gpu-webhook manifests --runbook`"


def test_the_cli_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifests", "--runbook"]) == 0
    assert capsys.readouterr().out == runbook()


def test_every_entry_of_both_configurations_is_patched_at_its_rendered_index(pack: RuleSet) -> None:
    rendered = {c["kind"]: [w["name"] for w in c["webhooks"]] for c in configurations(pack)}
    for policy in (OPEN, CLOSED):
        lines = commands(policy)
        patched: dict[str, list[str]] = {}
        for line in lines:
            words = shlex.split(line)
            assert words[:2] == ["kubectl", "patch"] and words[4:6] == ["--type=json", "-p"], line
            kind = {"validatingwebhookconfiguration": VALIDATING, "mutatingwebhookconfiguration": MUTATING}[words[2]]
            operations = json.loads(words[6])
            tests = {op["path"]: op["value"] for op in operations if op["op"] == "test"}
            replaced = [op for op in operations if op["op"] == "replace"]
            assert {op["value"] for op in replaced} == {policy}
            names = []
            for op in replaced:
                index = op["path"].split("/")[2]
                names.append(tests[f"/webhooks/{index}/name"])  # each replace guarded by the name at its index
                assert rendered[kind][int(index)] == names[-1]
            patched[kind] = names
        assert patched == rendered
    assert sorted(n for names in rendered.values() for n in names) == sorted(e.name for e in ENTRIES)
