"""The policy CRDs: manifests/base/crds.yaml is what webhook/install/crds.py generates from the engine's schemas.

Whether the apiserver accepts them (structural schemas, printer columns, the status subresource) is
tested on a real kube-apiserver: tests/e2e/test_policy_objects.py.
"""

from __future__ import annotations

from typing import Any

import yaml

from tests.support import REPO
from webhook.engine import SCHEMAS
from webhook.install.crds import RESOURCES, base_yaml, crds, structural


def test_the_committed_crds_are_current() -> None:
    committed = (REPO / "manifests/base/crds.yaml").read_text()
    assert committed == base_yaml(), "regenerate: python -m webhook.install.crds > manifests/base/crds.yaml"


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
    assert spec["properties"]["action"] == {"enum": ["Deny", "Warn", "Audit"], "type": "string", "default": "Deny"}
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
