"""The loader reports every problem with file:line:column and the rule's name, and loads nothing unsafe."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.engine import load_rules

HEADER = "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\n"


def errors_of(tmp_path: Path, text: str, name: str = "rule.yaml") -> list[str]:
    (tmp_path / name).write_text(text)
    result = load_rules(tmp_path)
    assert result.ruleset is None
    return [str(e).replace(str(tmp_path) + "/", "") for e in result.errors]


def test_unknown_field_points_at_the_key_and_suggests(tmp_path: Path) -> None:
    text = HEADER + "metadata: {name: r}\nspec:\n  match: {kinds: [Pod]}\n  validate:\n    expresion: 'true'\n"
    assert errors_of(tmp_path, text) == [
        "rule.yaml:7:5: rule r: unknown field 'spec.validate.expresion' (did you mean 'expression'?)",
        "rule.yaml:7:5: rule r: spec.validate: 'expression' is a required field",
    ]


def test_bad_enum(tmp_path: Path) -> None:
    text = (
        HEADER
        + "metadata: {name: r}\nspec:\n  action: Reject\n  match: {kinds: [Pod]}\n  validate: {expression: 'true'}\n"
    )
    assert errors_of(tmp_path, text) == [
        "rule.yaml:5:11: rule r: spec.action: 'Reject' is not one of: Deny, Warn, Audit"
    ]


def test_a_word_yaml_reads_as_a_boolean_is_explained_where_text_is_expected(tmp_path: Path) -> None:
    """Kubernetes' YAML is 1.1-flavoured: `message: no` is the boolean false, `value: 1.10` the number 1.1."""
    text = (
        HEADER + "metadata: {name: r}\nspec:\n  match: {kinds: [Pod]}\n"
        "  validate: {expression: 'true', message: no}\n"
        "  mutate:\n    - setLabels: {values: {team: 1.10}}\n"
    )
    assert errors_of(tmp_path, text) == [
        "rule.yaml:8:34: rule r: spec.mutate[0].setLabels.values.team: expected text, found a number (1.1): unquoted "
        "yes/no/on/off/true/false are booleans and digits are numbers in Kubernetes' YAML; quote the value",
        "rule.yaml:6:43: rule r: spec.validate.message: expected text, found a boolean (False): unquoted "
        "yes/no/on/off/true/false are booleans and digits are numbers in Kubernetes' YAML; quote the value",
    ]


def test_cel_syntax_error_is_located_inside_the_expression(tmp_path: Path) -> None:
    text = (
        HEADER + "metadata: {name: r}\nspec:\n  match: {kinds: [Pod]}\n  validate: {expression: 'object.spec. == 1'}\n"
    )
    (error,) = errors_of(tmp_path, text)
    # the expression's text starts at column 27 (after the quote); the parser stops at its 14th character
    assert error.startswith("rule.yaml:6:40: rule r: spec.validate.expression: CEL: ")
    assert "Syntax error" in error


def test_cel_error_in_a_literal_block_points_at_its_line(tmp_path: Path) -> None:
    text = (
        HEADER
        + "metadata: {name: r}\nspec:\n  match: {kinds: [Pod]}\n  validate:\n    expression: |\n      true &&\n      object.metadata.name == )\n"
    )
    (error,) = errors_of(tmp_path, text)
    # line 2 of the block is line 9 of the file; the stray ")" is its 25th character, after 6 spaces
    assert error.startswith("rule.yaml:9:31: rule r: spec.validate.expression: CEL: Syntax error")


def test_unknown_cel_function_is_a_compile_error(tmp_path: Path) -> None:
    text = (
        HEADER
        + "metadata: {name: r}\nspec:\n  match: {kinds: [Pod], condition: 'gpuCnt(podSpec) > 0'}\n  validate: {expression: 'true'}\n"
    )
    (error,) = errors_of(tmp_path, text)
    assert "rule r: spec.match.condition: CEL:" in error and "gpuCnt" in error


def test_duplicate_rule_names_across_files(tmp_path: Path) -> None:
    rule = HEADER + "metadata: {name: same}\nspec:\n  match: {kinds: [Pod]}\n  validate: {expression: 'true'}\n"
    (tmp_path / "a.yaml").write_text(rule)
    assert errors_of(tmp_path, rule, "b.yaml") == [
        "b.yaml:1:1: rule same: duplicate rule name (first defined at a.yaml:1:1)"
    ]


def test_yaml_syntax_error_and_duplicate_keys(tmp_path: Path) -> None:
    assert errors_of(tmp_path, "a: [1, 2\n")[0].startswith("rule.yaml:2:1: invalid YAML:")
    text = (
        HEADER
        + "metadata: {name: r}\nspec:\n  match: {kinds: [Pod]}\n  match: {kinds: [Job]}\n  validate: {expression: 'true'}\n"
    )
    assert errors_of(tmp_path, text) == ["rule.yaml:6:3: duplicate key 'match'"]


def test_python_tags_are_refused(tmp_path: Path) -> None:
    text = "!!python/object/apply:os.system ['echo pwned > " + str(tmp_path / "pwned") + "']\n"
    (error,) = errors_of(tmp_path, text)
    assert error.startswith(
        "rule.yaml:1:1: invalid YAML: tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed in rule files"
    )
    assert not (tmp_path / "pwned").exists()


def test_aliases_do_not_expand_exponentially(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    # 10^9 leaves if expanded: refused at load, quickly and without memory blow-up
    (error,) = errors_of(tmp_path, "\n".join(lines) + "\n")
    assert error == "rule.yaml:1:1: invalid YAML: aliases expand this document past 100000 values"


def test_every_error_of_every_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text(
        HEADER + "metadata: {name: one}\nspec: {match: {kinds: []}, validate: {expression: 'true'}}\n"
    )
    (tmp_path / "two.yaml").write_text(HEADER + "metadata: {name: Two}\nspec: {match: {kinds: [Pod]}}\n")
    result = load_rules(tmp_path)
    text = "\n".join(str(e) for e in result.errors)
    assert "one.yaml" in text and "should be non-empty" in text
    assert "two.yaml" in text and "does not match" in text and "needs `validate`, `mutate` or both" in text


def test_mutation_arguments_from_params_are_checked(tmp_path: Path) -> None:
    text = (
        HEADER
        + "metadata: {name: r}\nspec:\n  match: {kinds: [Pod]}\n  mutate:\n    - addToleration: {fromParam: tol}\n  params: {tol: {operator: Exists}}\n"
    )
    assert errors_of(tmp_path, text) == [
        "rule.yaml:7:7: rule r: spec.mutate[0].addToleration: params.tol 'key' is a required property"
    ]
    text = text.replace("params: {tol: {operator: Exists}}", "params: {}")
    assert errors_of(tmp_path, text) == ["rule.yaml:7:7: rule r: spec.mutate[0].addToleration: params.tol is not set"]


def test_shipped_rule_pack_loads(tmp_path: Path) -> None:
    from tests.conftest import load_rules_once  # the session's one load of the pack (the `pack` fixture)
    from tests.support import RULES

    result = load_rules_once(RULES)
    assert result.errors == []
    assert result.ruleset is not None and len(result.ruleset.rules) >= 5


def test_missing_paths_are_errors_and_require_lists_them(tmp_path: Path) -> None:
    from webhook.engine.loader import RuleLoadError

    result = load_rules([tmp_path / "nope", tmp_path])
    assert [str(e) for e in result.errors] == [f"{tmp_path}/nope:1:1: rules path not found"]
    with pytest.raises(RuleLoadError, match="rules path not found"):
        result.require()


def test_a_broken_test_suite_beside_the_rules_does_not_stop_them_loading(tmp_path: Path) -> None:
    # The server loads the same directory `gpu-webhook test` reads; suites are that command's
    # business (and lint's), so a duplicate key or an alias bomb in one cannot take the rules down.
    rule = HEADER + "metadata: {name: r}\nspec:\n  match: {kinds: [Pod]}\n  validate: {expression: 'true'}\n"
    suite = (
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicyTest\nmetadata: {name: s}\n"
        "metadata: {name: again}\nspec:\n  cases: &c [*c]\n"
    )
    (tmp_path / "rule.yaml").write_text(rule + "---\n" + suite)
    result = load_rules(tmp_path)
    assert result.ok and result.ruleset is not None, result.errors
    assert [r.name for r in result.ruleset.rules] == ["r"]
    twice = HEADER + "metadata:\n  name: r\n  name: r\nspec:\n  match: {kinds: [Pod]}\n  validate: {expression: 'true'}\n"
    # positions of the documents after a skipped one are still their own
    assert errors_of(tmp_path, suite + "---\n" + twice) == ["rule.yaml:12:3: duplicate key 'name'"]
