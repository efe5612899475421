"""One CEL tokenizer (webhook/cel/celsyntax.py) for the cost check, the helper rewrite and lint.

The literals and comments below each broke one of the three scanners this module replaced, each
in its own way (noted per case). Where a literal ends is checked against the runtime's lexer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.authoring.celfields import field_problems, scope_for
from webhook.authoring.lint import lint
from webhook.cel import celsyntax
from webhook.cel.celhelpers import rewrite
from webhook.engine.cel import CelCompileError, CelEnvironment, check_cost
from webhook.engine.resources import DEFAULT

PACKAGE = Path(celsyntax.__file__).parents[1]  # webhook/


@pytest.fixture(scope="module")
def env() -> CelEnvironment:
    return CelEnvironment(DEFAULT)


# literal -> the value the runtime gives it
LITERALS = {
    r"'''a\''''": "a'",  # an escaped quote just before the closing triple quote
    "'''it's (not code)'''": "it's (not code)",
    '"""say "hi" // not a comment"""': 'say "hi" // not a comment',
    r"r'\d+'": "\\d+",  # raw: the backslash stays, and still escapes the next character for the lexer
    r"'a\'b'": "a'b",
    "'http://example.com/a,b'": "http://example.com/a,b",
    "'''two\nlines'''": "two\nlines",
    r"b'\xff'": b"\xff",
}


@pytest.mark.parametrize("literal", LITERALS)
def test_a_literal_ends_where_the_runtimes_lexer_ends_it(env: CelEnvironment, literal: str) -> None:
    found = celsyntax.tokens(literal)
    assert [(t.kind, t.text) for t in found] == [("string", literal), ("end", "")]
    assert celsyntax.string_end(literal, 0) == len(literal)
    assert env.compile(literal).evaluate(env.activation({})) == LITERALS[literal]


@pytest.mark.parametrize("broken", [r"r'\'", "'''a''''", "'open", "x = 1"])
def test_what_the_runtime_cannot_lex_the_tokenizer_refuses_too(env: CelEnvironment, broken: str) -> None:
    with pytest.raises(CelCompileError):
        env.compile(broken)
    with pytest.raises(celsyntax.CelSyntaxError):
        celsyntax.tokens(broken)


def test_blank_keeps_offsets_and_hides_literals_and_comments() -> None:
    text = "'''a\\'''' + x.y // it's (\n+ \"b,c\""
    blanked = celsyntax.blank(text)
    assert len(blanked) == len(text) and blanked.count("\n") == 1
    assert blanked == "'''   ''' + x.y          \n+ \"   \""


def test_call_arguments_split_at_top_level_commas_only() -> None:
    text = "f(a[1, 2], 'x, y' /* no */, {'k': (1, 2)}.k // ,)\n, g(h(), i))"
    args, end = celsyntax.call_arguments(text.replace("/* no */", ""), 1)
    assert [a.strip() for a in args] == ["a[1, 2]", "'x, y'", "{'k': (1, 2)}.k // ,)", "g(h(), i)"]
    assert end == len(text.replace("/* no */", ""))


# -- the cost check ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        # the old check read the comment as code: "replace() needs a string literal" for valid CEL
        "object.metadata.name.replace('-', '_') // not x.replace('a', y)",
        "object.metadata.name.replace('a', // (see the docs)\n 'b') == ''",
        # backtick-quoted field names are CEL too
        "object.metadata.labels.`app.kubernetes.io/name`.replace('.', '-') == ''",
    ],
)
def test_cost_check_ignores_comments(env: CelEnvironment, text: str) -> None:
    check_cost(text)
    env.compile(text)


def test_cost_check_sees_code_after_an_escaped_triple_quote(env: CelEnvironment) -> None:
    # the old check ended the literal one quote early, and the next quote hid the computed replacement
    text = "'''\\'''' + object.metadata.name.replace('a', object.metadata.name) + '' == ''"
    with pytest.raises(CelCompileError, match="replace\\(\\) needs a string literal"):
        env.compile(text)


def test_cost_check_counts_comprehensions_in_code_only(env: CelEnvironment) -> None:
    deep = "object.spec.containers.all(a, a.env.all(b, b.`name`.size() > 0 && [1].all(c, [2].all(d, true))))"
    with pytest.raises(CelCompileError, match="nested 4 deep"):
        env.compile(deep)
    shallow = "object.spec.containers.all(a, a.name != '.all(b, .all(c, .all(d,') // .all(e, .all(f,\n"
    env.compile(shallow)


# -- the helper rewrite -----------------------------------------------------------------------------


def test_rewrite_reads_past_a_quote_in_a_comment() -> None:
    # the old rewrite stopped at the comment's quote ("unterminated string literal") and left the
    # expression to the slower Python helpers
    assert rewrite("quantity('1Gi') > 0.0 // 'quoted") == "1073741824.0 > 0.0 // 'quoted"
    assert rewrite("isQuantity('1x') // \"see (below\n || true") == 'false // "see (below\n || true'


def test_rewrite_leaves_literals_and_comments_alone() -> None:
    assert rewrite("targetGpuCount > 0 // gpuCount(podSpec)") == "targetGpuCount > 0 // gpuCount(podSpec)"
    assert rewrite("'''a\\'''' + string(gpuCount(podSpec))") == "'''a\\'''' + string(targetGpuCount)"
    assert rewrite("x.quantity('1') + quantity") == "x.quantity('1') + quantity"  # a method, an identifier


# -- lint ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "offset"),
    [
        # the old parser ended the literal early and read the field as part of a string: no warning
        ("'''it\\'''' == '' || podSpec.containerz.size() > 0", 28),
        ("b'''\\'''' == b'' || podSpec.containerz.size() > 0", 28),
        ("podSpec.`containerz`.size() > 0", 8),  # the old parser gave up on backticks
    ],
)
def test_lint_finds_a_misspelt_field_after_tricky_literals(text: str, offset: int) -> None:
    (problem,) = field_problems(text, scope_for(["Pod"], autogen=False))
    assert problem.offset == offset and "no field 'containerz'" in problem.message


def test_lint_slow_forms_ignore_text_in_triple_quoted_literals_and_comments(tmp_path: Path) -> None:
    rule = tmp_path / "rule.yaml"
    rule.write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: r}\nspec:\n"
        "  match: {kinds: [Pod]}\n  validate:\n    expression: |-\n"
        "      '''it's not gpuCount(object.spec)''' != object.metadata.name // nor quantity(x)\n"
        "    message: m\n"
    )
    assert [str(e) for e in lint([rule])] == []
    rule.write_text(rule.read_text().replace("!= object.metadata.name", "!= string(gpuCount(object.spec))"))
    assert ["gpuCount() of a spec other than podSpec" in str(e) for e in lint([rule])] == [True]


def test_no_other_string_literal_scanner_in_the_modules_that_use_celsyntax() -> None:
    for path in [
        PACKAGE / "engine" / "cel.py",
        PACKAGE / "cel" / "celhelpers.py",
        PACKAGE / "authoring" / "celfields.py",
    ]:
        source = path.read_text()
        assert "celsyntax" in source and "[rRbB]" not in source, path
    assert "[rRbB]" not in (PACKAGE / "authoring" / "lint.py").read_text()


def test_lint_params_check_ignores_params_named_in_literals_and_comments(tmp_path: Path) -> None:
    rule = tmp_path / "rule.yaml"
    rule.write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: r}\nspec:\n"
        "  match: {kinds: [Pod]}\n  params: {team: a}\n  validate:\n"
        "    expression: \"params.team != 'see params.teem' // or params.tema\"\n    message: m\n"
    )
    assert [str(e) for e in lint([rule])] == []
    rule.write_text(rule.read_text().replace("params.team !=", "params.teem !="))
    assert ["params.teem is not a param of this rule" in str(e) for e in lint([rule])] == [True]


def test_lint_params_check_reads_a_leading_dot_and_not_a_field(tmp_path: Path) -> None:
    """`.params.x` (CEL's leading dot) is the rule's params; `x.params.y` is a field of x."""
    rule = tmp_path / "rule.yaml"
    rule.write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: r}\nspec:\n"
        "  match: {kinds: [Pod]}\n  params: {team: a}\n  validate:\n"
        '    expression: "podMetadata.labels.team in [.params.teem, object.params.tema]"\n    message: m\n'
    )
    assert ["params.teem is not a param of this rule" in str(e) for e in lint([rule])] == [True]
