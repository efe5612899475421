"""Mixed mode: the webhook's rules ConfigMap minus the exported rules; every rule in exactly one place."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.export.equivalence import EXTRA_RULES, pack_with_extras
from tests.support import RULES
from webhook.engine import compile_documents
from webhook.export import export, exported_rule_names
from webhook.export.mixed import webhook_files
from webhook.kubeyaml import load_documents


def test_each_rule_runs_in_exactly_one_place(tmp_path: Path) -> None:
    ruleset = pack_with_extras()
    data = {p.name: p.read_text() for p in sorted([*RULES.glob("*.yaml"), *EXTRA_RULES.glob("*.yaml")])}
    data["two.yaml"] = (
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: keep-me}\n"
        "spec:\n  match: {kinds: ['*']}\n  validate: {expression: 'true'}\n---\n"
        + (RULES / "no-privileged-in-tenants.yaml").read_text().replace("no-privileged-in-tenants", "dup-native")
    )
    exported = set(exported_rule_names(ruleset)) | {"dup-native"}
    kept = webhook_files(data, exported)
    documents = [d for key, text in kept.items() for d in load_documents(text, key)]
    webhook_rules = {r.name for r in compile_documents(documents).require().rules}
    assert webhook_rules & exported == set()
    # a rule exported for CREATE only (ratcheting on UPDATE not modelled) stays in the webhook as well
    assert {r.rule for r in export(ruleset).rules if r.note} <= webhook_rules
    assert webhook_rules | exported == {r.name for r in ruleset.rules} | {"keep-me", "dup-native"}
    assert kept["two.yaml"] != data["two.yaml"] and "keep-me" in kept["two.yaml"]
    untouched = [k for k, text in kept.items() if k != "two.yaml"]
    assert all(kept[k] == data[k] for k in untouched)  # comments and citations kept
    assert all(yaml.safe_load(data[k])["metadata"]["name"] not in exported for k in untouched)
