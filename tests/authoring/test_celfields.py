"""The CEL field checker: parses every expression the pack and the cookbook use, and finds bad fields."""

from __future__ import annotations

import pytest

from tests.authoring.conftest import REPO, RULES
from webhook.authoring.celfields import field_problems, scope_for
from webhook.authoring.lint import document_cel_texts
from webhook.engine.celsyntax import CelSyntaxError, parse
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


def test_object_is_only_checked_for_pod_only_rules():
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
