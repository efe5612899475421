"""The shipped JSON Schemas are the loader's, and they check what editors will see."""

from __future__ import annotations

import json

import yaml
from jsonschema import Draft202012Validator

from tests.authoring.conftest import RULES
from webhook.authoring.schemas import FILES, SHIPPED, render
from webhook.engine.documents import TEST_SCHEMA
from webhook.engine.schema import POLICY_SCHEMA


def test_shipped_files_match_the_loader_schema():
    for kind, name in FILES.items():
        assert (SHIPPED / name).read_text() == render(kind), f"regenerate with: gpu-webhook schema --out {SHIPPED}"
    assert json.loads((SHIPPED / "gpupolicy.json").read_text()) == POLICY_SCHEMA


def test_schemas_are_valid_and_accept_the_pack():
    for schema in (POLICY_SCHEMA, TEST_SCHEMA):
        Draft202012Validator.check_schema(schema)
    for path in RULES.rglob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            schema = TEST_SCHEMA if document["kind"] == "GPUPolicyTest" else POLICY_SCHEMA
            assert not list(Draft202012Validator(schema).iter_errors(document)), path


def test_schema_command(cli, tmp_path):
    code, out, _ = cli("schema", "--out", str(tmp_path))
    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES.values())
    assert out.splitlines() == [str(tmp_path / name) for name in FILES.values()]
    code, out, _ = cli("schema", "--kind", "GPUPolicyTest")
    assert json.loads(out)["title"] == "GPUPolicyTest"
