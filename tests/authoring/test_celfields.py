"""The CEL field checker: parses every expression the pack and the cookbook use, and finds bad fields."""

from __future__ import annotations

import pytest

from tests.authoring.conftest import REPO, RULES
from webhook.authoring.celfields import field_problems, scope_for
from webhook.authoring.lint import document_cel_texts
from webhook.cel.celsyntax import CelSyntaxError, parse
from webhook.kubeyaml import load_documents, plain_documents

POD_RULE = scope_for(["Pod"], autogen=True)


def pack_expressions():
    for path in [*RULES.glob("*.yaml"), REPO / "docs" / "authoring.md"]:
        text = path.read_text()
        if path.suffix == ".md":
            text = "\n---\n".join(b.split("```")[0] for b in text.split("```yaml\n")[1:])
        for document in plain_documents(text):
            if isinstance(document, dict) and document.get("kind") == "GPUPolicy":
                yield from (text for _, text in document_cel_texts(document))


def test_every_expression_of_the_pack_and_the_docs_parses():
    expressions = [e for e in pack_expressions() if "..." not in e]
    assert len(expressions) >= 20
    for text in expressions:
        parse(text)


@pytest.mark.parametrize(
    "text",
    [
        "a.b.exists_one(x, x > 1)",
        "{'a': 1}['a'] == 1",
        "[1, 2].map(x, x < 2, x * 2)",
        "r'raw' + '''tri''' + \"q\\\"\"",
        "-1 + 2 > 0 && !true",
        "a ? b : c ? d : e",
        "x in [1] && y != 2u || 1.5e3 > 0",
    ],
)
def test_parses_cel_syntax(text):
    parse(text)


def test_unparseable_text_is_left_to_the_compiler():
    with pytest.raises(CelSyntaxError):
        parse("a ==")
    assert field_problems("podSpec.containerz ==", POD_RULE) == []


def test_macro_variables_take_the_element_type():
    problems = field_problems(
        "podSpec.tolerations.all(t, t.keys == 'a') && podSpecs.exists(s, s.nodeSelectr)", POD_RULE
    )
    assert [p.message for p in problems] == [
        "Toleration has no field 'keys' (did you mean 'key'?)",
        "PodSpec has no field 'nodeSelectr' (did you mean 'nodeSelector'?)",
    ]


def test_maps_and_unknown_values_are_not_checked():
    text = "podSpec.nodeSelector.anything == params.whatever.x && request.userInfo.foo && c.bar"
    assert field_problems(text, POD_RULE) == []


def test_object_beyond_metadata_is_only_checked_for_pod_only_rules():
    assert field_problems("object.spec.replicas > 1", scope_for(["Deployment"], autogen=True)) == []
    assert field_problems("has(object.spec.containers)", POD_RULE) == []  # a guard, not a use
    (problem,) = field_problems("object.metadata.lables.x", scope_for(["Pod"], autogen=False))
    assert problem.offset == len("object.metadata.") and "ObjectMeta has no field 'lables'" in problem.message


def test_positions_in_block_scalars():
    text = "spec:\n  expression: |\n    first\n      second\n  plain: one two\n  quoted: 'abc'\n"
    (document,) = load_documents(text, "f.yaml")
    assert document.text_position(("spec", "expression"), 0) == (3, 5)
    assert document.text_position(("spec", "expression"), len("first\n  sec")) == (4, 10)
    assert document.text_position(("spec", "plain"), 4) == (5, 14)
    assert document.text_position(("spec", "quoted"), 1) == (6, 13)


@pytest.mark.parametrize(
    ("kinds", "autogen"), [(["Pod"], True), (["Deployment"], True), (["Job", "Pod"], False), (["*"], True)]
)
def test_object_metadata_is_checked_for_every_kind(kinds, autogen):
    """ObjectMeta is the same for every kind: a typo there is one whatever `object` is (issue 29)."""
    scope = scope_for(kinds, autogen=autogen, reads_kind=True)
    (problem,) = field_problems("has(object.metadata.lables)", scope)
    assert problem.offset == len("has(object.metadata.") and "ObjectMeta has no field 'lables'" in problem.message
    (problem,) = field_problems("oldObject.metadata.generateNam != ''", scope)
    assert "did you mean 'generateName'" in problem.message
    fields = ["name", "generateName", "namespace", "labels", "annotations", "ownerReferences", "finalizers", "uid"]
    fields += ["resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "managedFields"]
    fields += ["deletionGracePeriodSeconds"]
    assert field_problems(" && ".join(f"has(object.metadata.{f})" for f in fields), scope) == []
    assert field_problems("object.spec.anything && object.status.x", scope_for(kinds, autogen=True)) == []


def test_pod_metadata_is_checked_as_object_meta():
    (problem,) = field_problems("'team' in podMetadata.lables", POD_RULE)
    assert "ObjectMeta has no field 'lables'" in problem.message


def test_an_autogen_pod_rule_reading_the_workloads_labels_is_told_of_pod_metadata():
    """With autogen, `object.metadata.labels` are the Deployment's, not its pods': lint says so, once."""
    text = "has(object.metadata.labels) && 'team' in object.metadata.labels"
    (problem,) = field_problems(text, POD_RULE)
    assert problem.offset == len("has(object.metadata.")
    assert "use `podMetadata.labels`" in problem.message and "autogen" in problem.message
    (problem,) = field_problems("'x' in oldObject.metadata.annotations", POD_RULE)
    assert "`podMetadata.annotations`" in problem.message
    # where `object` is the Pod, the workload itself, or the rule tells them apart by object.kind: meant
    assert field_problems(text, scope_for(["Pod"], autogen=False)) == []
    assert field_problems(text, scope_for(["Deployment", "Job"], autogen=True)) == []
    assert field_problems(text, scope_for(["Pod"], autogen=True, reads_kind=True)) == []
    assert field_problems("object.metadata.name != '' && podMetadata.labels.size() > 0", POD_RULE) == []
