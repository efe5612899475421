"""The policy CRDs: manifests/base/crds.yaml is what webhook/install/crds.py generates from the engine's schemas.

Whether the apiserver accepts them (structural schemas, printer columns, the status subresource) is
tested on a real kube-apiserver: tests/e2e/test_policy_objects.py.
"""

from __future__ import annotations

from typing import Any

import yaml

from tests.support import REPO
from webhook.engine.documents import SCHEMAS
from webhook.install import crds as generator
from webhook.install.crds import RESOURCES, base_yaml, crds, structural, unbounded


def test_the_committed_crds_are_current() -> None:
    committed = (REPO / "manifests/base/crds.yaml").read_text()
    assert committed == base_yaml(), "regenerate: python -m webhook.commands.generate crds > manifests/base/crds.yaml"


def test_the_kustomize_base_installs_them() -> None:
    kustomization = yaml.safe_load((REPO / "manifests/base/kustomization.yaml").read_text())
    assert "crds.yaml" in kustomization["resources"]


def _nodes(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(schema, dict):
        return []
    found = [(path, schema)]
    for name, child in (schema.get("properties") or {}).items():
        found += _nodes(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += _nodes(schema[key], f"{path}[{key}]")
    return found


def test_every_node_is_typed_or_preserves_unknown_fields() -> None:
    """The rules of a structural schema that the generator must keep (the apiserver checks them all)."""
    for crd in crds():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in _nodes(schema):
            assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), (crd["metadata"]["name"], path)
            assert not ("properties" in node and "additionalProperties" in node), path
            for branch in node.get("anyOf", []) + node.get("oneOf", []):
                assert set(branch) <= {"required"}, (path, branch)
            assert "const" not in node and "$schema" not in node, path
            assert "default" not in node or node.get("type") in ("string", "boolean", "integer", "number"), path


def test_an_enum_of_the_json_schema_is_kept() -> None:
    spec = structural(SCHEMAS["GPUPolicy"]["properties"]["spec"])
    assert spec["properties"]["action"] == {
        "enum": ["Deny", "Warn", "Audit"],
        "type": "string",
        "maxLength": 5,  # the longest value: what the apiserver's CEL cost estimate reads
        "default": "Deny",
    }
    assert spec["required"] == ["match"]
    # a kind is a name or an API mapping: the CRD keeps any, the webhook's loader checks which
    assert spec["properties"]["match"]["properties"]["kinds"]["items"] == {"x-kubernetes-preserve-unknown-fields": True}


def test_kinds_scopes_and_columns() -> None:
    by_kind = {crd["spec"]["names"]["kind"]: crd for crd in crds()}
    assert set(by_kind) == {r.kind for r in RESOURCES} == {"GPUPolicy", "GPUPolicyOverlay", "GPUPolicyException"}
    assert by_kind["GPUPolicyException"]["spec"]["scope"] == "Namespaced"
    assert by_kind["GPUPolicy"]["spec"]["scope"] == by_kind["GPUPolicyOverlay"]["spec"]["scope"] == "Cluster"
    columns = [c["name"] for c in by_kind["GPUPolicy"]["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Action", "FailurePolicy", "Ready", "Age"]
    assert by_kind["GPUPolicy"]["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_every_list_string_and_map_is_bounded() -> None:
    """Anything a namespace user writes is bounded in size by the CRD itself (issue 34, point 4)."""
    for made in crds():
        schema = made["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert unbounded(schema) == [], made["metadata"]["name"]
    exception = next(c for c in crds() if c["spec"]["names"]["kind"] == "GPUPolicyException")
    spec = exception["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["rules"]["maxItems"] == 128
    assert spec["properties"]["rules"]["items"]["maxLength"] == 253  # a DNS-1123 subdomain, as metadata.name
    labels = spec["properties"]["match"]["properties"]["objectSelector"]["properties"]["matchLabels"]
    assert labels["maxProperties"] == 64 and labels["additionalProperties"]["maxLength"] == 63  # a label value
    assert labels["x-kubernetes-validations"] == [
        {"rule": "self.all(k, k.size() <= 317)", "message": "keys are at most 317 characters"}
    ]


def test_an_unbounded_field_cannot_be_generated(monkeypatch: Any) -> None:
    """The generator refuses a schema with a list, string or map without a bound, so a new field cannot
    slip through unbounded."""
    schema = {**SCHEMAS["GPUPolicyException"]}
    spec = {**schema["properties"]["spec"]}
    spec["properties"] = {
        **spec["properties"],
        "note": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 9}},
    }
    schema["properties"] = {**schema["properties"], "spec": spec}
    monkeypatch.setitem(SCHEMAS, "GPUPolicyException", schema)
    exception = next(r for r in RESOURCES if r.kind == "GPUPolicyException")
    try:
        generator.crd(exception)
    except ValueError as error:
        assert str(error) == "gpupolicyexceptions.gpu-webhook.io: no size bound on .spec.note, .spec.tags"
    else:
        raise AssertionError("an unbounded field was generated")


def test_the_loader_refuses_what_the_crd_refuses() -> None:
    """The same bounds in the loader's schema: an oversized exception file fails with the field's path."""
    from webhook.engine import RuleLoadError, parse_exception

    document = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicyException",
        "metadata": {"name": "too-many", "namespace": "team-a"},
        "spec": {"rules": [f"rule-{i}" for i in range(129)], "reason": "x" * 1025},
    }
    try:
        parse_exception(document)
    except RuleLoadError as error:
        text = str(error)
        assert "spec.rules: [" in text and "is too long" in text
        assert "spec.reason: " in text
    else:
        raise AssertionError("an oversized exception parsed")
