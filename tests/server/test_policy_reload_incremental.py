"""What a reload with policy objects does again, and what it does not (issue 39, bench/policy_scale.py): the
rule files are parsed once per content, a document found valid is not checked again while its content
is the same, and nothing of that lets a changed or broken document through.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.support import RULES
from webhook.engine import load_rules
from webhook.kube.policyobjects import PolicyObject, policy_object
from webhook.kubeyaml import Document
from webhook.policies.files import RuleFiles
from webhook.policies.isolation import isolated_load


def gpupolicy(name: str, expression: str = "true", **spec: Any) -> PolicyObject:
    return policy_object(
        {
            "apiVersion": "gpu-webhook.io/v1alpha1",
            "kind": "GPUPolicy",
            "metadata": {"name": name, "uid": name, "generation": 1},
            "spec": {"match": {"kinds": ["Pod"]}, "validate": {"expression": expression, "message": name}, **spec},
        }
    )


def test_the_rule_files_are_parsed_once_per_content(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules, ignore=shutil.ignore_patterns("tests"))
    files = RuleFiles([str(rules)])
    first = isolated_load(files, [gpupolicy("site-a")])
    second = isolated_load(files, [gpupolicy("site-a"), gpupolicy("site-b")])
    assert first.result.ruleset is not None and second.result.ruleset is not None
    assert files.reads == 1
    assert {r.name for r in second.result.ruleset.rules} - {r.name for r in first.result.ruleset.rules} == {"site-b"}
    assert second.result.files == load_rules([str(rules)]).files

    ceiling = rules / "gpu-per-pod-ceiling.yaml"
    ceiling.write_text(ceiling.read_text().replace("defaultCeiling: 8", "defaultCeiling: 4"))
    third = isolated_load(files, [gpupolicy("site-a")])
    assert files.reads == 2 and third.result.ruleset is not None
    assert next(r for r in third.result.ruleset.rules if r.name == "gpu-per-pod-ceiling").params["defaultCeiling"] == 4

    ceiling.write_text("spec: [unclosed")  # a file that does not read: the loader's own error, located
    broken = isolated_load(files, [gpupolicy("site-a")])
    assert broken.result.ruleset is None
    assert any(e.location.file == str(ceiling) and "invalid YAML" in e.message for e in broken.result.errors)


def test_a_document_found_valid_is_checked_again_once_its_content_changes() -> None:
    good = gpupolicy("site-valid")
    assert isolated_load([str(RULES)], [good]).result.ruleset is not None
    for broken in (
        gpupolicy("site-valid", action="Refuse"),  # one field changed: refused as ever
        gpupolicy("site-valid", autogen=float("nan")),  # NaN, which JSON writes as null
    ):
        load = isolated_load([str(RULES)], [broken])
        assert load.result.ruleset is not None and list(load.rejected) == [("GPUPolicy", "", "site-valid")]
    located = Document(data=good.document.data, file="elsewhere.yaml", index=0)
    assert load_rules([str(RULES)], [located]).ok  # the same content anywhere is as valid
