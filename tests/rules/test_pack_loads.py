"""The shipped pack loads, and every rule documents itself."""

from __future__ import annotations

from pathlib import Path

from tests.rules.rulekit import RULES
from webhook.kubeyaml import plain_documents


def test_every_rule_file_holds_one_documented_rule(pack):
    files = sorted(RULES.glob("*.yaml"))
    assert len(files) == len(pack.rules)
    for file in files:
        text = file.read_text()
        assert text.startswith("#"), f"{file.name}: no header comment"
        (document,) = list(plain_documents(text))
        assert document["metadata"]["name"] == Path(file).stem
        assert document["metadata"]["annotations"]["gpu-webhook.io/description"]
