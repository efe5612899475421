"""Every exported object validates against the Kubernetes OpenAPI schema of the release it targets."""

from __future__ import annotations

import kubernetes_validate
import pytest

from tests.export.equivalence import pack_with_extras
from webhook.engine import RuleSet
from webhook.export import CLAIMS_UNRESOLVED, Release, export


@pytest.fixture(scope="module")
def ruleset() -> RuleSet:
    return pack_with_extras()


@pytest.mark.parametrize("version", ["1.30", "1.32", "1.34", "1.36", "1.37"])
def test_objects_validate_against_the_release_schema(ruleset: RuleSet, version: str) -> None:
    # --claims unresolved exports a superset (test_claims.py): the default's rules and the counting ones
    result = export(ruleset, release=Release.parse(version), claims=CLAIMS_UNRESOLVED)
    assert result.objects
    for document in result.objects:
        kubernetes_validate.validate(document, version, strict=True)  # raises on any schema violation


@pytest.mark.parametrize(
    ("version", "vap", "map_version"),
    [("1.30", "v1", None), ("1.33", "v1", "v1alpha1"), ("1.35", "v1", "v1beta1"), ("1.36", "v1", "v1")],
)
def test_api_versions_follow_the_release(ruleset: RuleSet, version: str, vap: str, map_version: str | None) -> None:
    result = export(ruleset, release=Release.parse(version))
    versions = {(o["kind"], o["apiVersion"].split("/")[1]) for o in result.objects}
    assert ("ValidatingAdmissionPolicy", vap) in versions
    mutating = {v for k, v in versions if k.startswith("Mutating")}
    assert mutating == ({map_version} if map_version else set())
    if map_version is None:
        assert any("no MutatingAdmissionPolicy" in r.reason for r in result.refused)


def test_a_broken_object_is_caught_by_the_schema(ruleset: RuleSet) -> None:
    """The schema check can fail: a validation without its expression is rejected."""
    document = next(o for o in export(ruleset).objects if o["kind"] == "ValidatingAdmissionPolicy")
    document["spec"]["validations"][0]["expresion"] = document["spec"]["validations"][0].pop("expression")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, "1.36", strict=True)
