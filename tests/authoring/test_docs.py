"""docs/authoring.md: every GPUPolicy of the cookbook loads and lints clean; its test suite passes."""

from __future__ import annotations

import re

from tests.authoring.conftest import REPO
from webhook.authoring.lint import lint
from webhook.kubeyaml import plain_documents

DOC = REPO / "docs" / "authoring.md"
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks(kind: str, section: str = "") -> list[str]:
    """YAML blocks holding a document of kind, after the heading `section` (the reference's outline is a fragment)."""
    document = DOC.read_text()
    found = []
    for text in BLOCK.findall(document[document.index(section) :]):
        kinds = {d.get("kind") for d in plain_documents(text) if isinstance(d, dict)}
        if kind in kinds:
            found.append(text)
    return found


def test_every_cookbook_rule_lints_clean(tmp_path):
    policies = blocks("GPUPolicy", "## 7. Cookbook")
    names = [d["metadata"]["name"] for text in policies for d in plain_documents(text)]
    assert len(names) >= 13 and len(set(names)) == len(names)
    for index, text in enumerate(policies):
        path = tmp_path / f"block-{index}.yaml"
        path.write_text(text)
        assert [str(e) for e in lint([path])] == [], text
    # and together, as one pack
    assert [str(e) for e in lint([tmp_path])] == []


def test_the_documented_suite_passes_against_the_cookbook(cli, tmp_path):
    rules = tmp_path / "rules"
    (rules / "tests").mkdir(parents=True)
    for index, text in enumerate(blocks("GPUPolicy", "## 7. Cookbook")):
        (rules / f"{index}.yaml").write_text(text)
    (suite,) = blocks("GPUPolicyTest")
    (rules / "tests" / "doc.test.yaml").write_text(suite)
    code, out, _ = cli("test", str(rules))
    assert (code, out.splitlines()[-1]) == (0, "2 passed, 0 failed"), out
