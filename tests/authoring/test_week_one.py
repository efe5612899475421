"""Issue 29, "a new admin's week one without surprises": what the README, the docs and the commands' own
words promise is what the commands do."""

from __future__ import annotations

import glob
import io
import re
from collections.abc import Callable

import pytest

from tests.authoring.conftest import HEADER, REPO, RULES
from webhook.cli import build_parser, main, version
from webhook.engine import RuleSet
from webhook.engine.cel import VARIABLES

CLI = Callable[..., tuple[int, str, str]]


def test_the_readme_counts_the_rules_of_the_pack(pack: RuleSet) -> None:
    readme = (REPO / "README.md").read_text()
    counts = re.findall(r"\b(\d+) rules\b", readme)
    assert counts, "the README no longer counts the pack's rules"
    assert {int(n) for n in counts} == {len(pack.rules)}, counts


def test_the_readme_says_what_version_prints(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    out = capsys.readouterr().out
    # the program's version (git's: it changes with every commit), then the default pack's digest
    assert exit_.value.code == 0 and out == f"gpu-webhook {version()}\n"
    program, pack = out.splitlines()
    readme = " ".join((REPO / "README.md").read_text().split())
    (claim,) = re.findall(r"`gpu-webhook --version` [^;]*", readme)
    shown = re.search(r"\(`(gpu-webhook [^`]+)`\)", claim)
    assert shown and re.fullmatch(r"gpu-webhook \d+\.\d+(\.\d+)?(\.dev\d+\+g[0-9a-f]+)?", shown.group(1)), claim
    assert program.startswith("gpu-webhook ") and pack.startswith("rule pack sha256:")
    assert "setuptools-scm" in claim and "digest" in claim, claim


def test_help_names_what_is_there() -> None:
    helps = {name: " ".join(p.format_help().split()) for name, p in _subcommands().items()}
    # installed, the default is the pack inside the package, not a checkout's rules/
    assert not re.search(r"\brepo(sitory)?'s\b|\brepo\b", helps["serve"]), helps["serve"]
    # the schema command writes every schema it offers, and says so
    (kind,) = [a for a in _subcommands()["schema"]._actions if a.dest == "kind"]
    assert kind.choices
    described = _subcommands()["schema"].description or ""
    assert all(k in described for k in kind.choices), described
    top = " ".join(build_parser().format_help().split())
    assert all(k in top for k in kind.choices), top


def test_every_cel_variable_is_in_the_authoring_table() -> None:
    authoring = (REPO / "docs" / "authoring.md").read_text()
    documented = set(re.findall(r"^\| `(\w+)` \|", authoring, flags=re.M))
    assert set(VARIABLES) <= documented, set(VARIABLES) - documented
    (row,) = [line for line in authoring.splitlines() if line.startswith("| `defaultPriorityClass` |")]
    assert "globalDefault" in row and "`null`" in row


def _subcommands() -> dict:
    import argparse

    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_lint_says_so_when_there_is_nothing_to_fix(cli: CLI, write) -> None:
    write(
        "rules/a.yaml",
        HEADER + "metadata: {name: a}\nspec:\n  match: {kinds: [Pod]}\n  validate: {expression: 'true'}\n",
    )
    write(
        "rules/b.yaml",
        HEADER
        + "metadata: {name: b}\nspec:\n  match: {kinds: [Pod]}\n  validate: {expression: 'true'}\n---\n"
        + HEADER
        + "metadata: {name: c}\nspec:\n  match: {kinds: [Pod]}\n  validate: {expression: 'true'}\n",
    )
    suite = "metadata: {name: a}\nspec:\n  cases:\n    - {name: x, object: {kind: Pod}, expect: {allowed: true}}\n"
    rules = write(
        "rules/tests/a.test.yaml", "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicyTest\n" + suite
    ).parents[1]
    assert cli("lint", str(rules)) == (0, "3 rules in 2 files: no problems\n", "")


def test_explain_without_the_namespace_says_how_to_give_it(cli: CLI, tmp_path) -> None:
    pod = REPO / "examples" / "pod-notebook.yaml"
    _, out, err = cli("explain", "-f", str(pod), "--rules", str(RULES), "--no-color")
    (hint,) = [line for line in err.splitlines() if line.startswith("hint:")]
    assert "not evaluated: no namespace context" in out
    assert "no Namespace object named 'ml-research'" in hint and "--namespace-objects FILE" in hint
    namespace = tmp_path / "ns.yaml"
    namespace.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml-research}\n")
    _, out, err = cli("explain", "-f", str(pod), "--rules", str(RULES), "--namespace-objects", str(namespace))
    assert "hint:" not in err and "no namespace context" not in out


def test_stdin_is_called_stdin_everywhere(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("a: [\n"))
    code, _, err = cli("explain", "-f", "-", "--rules", str(RULES))
    assert code == 2 and "<stdin>:2:1: invalid YAML" in err, err
    monkeypatch.setattr("sys.stdin", io.StringIO("apiVersion: v1\nkind: AdmissionReview\nrequest: {object: {}}\n"))
    code, _, err = cli("explain", "-f", "-", "--rules", str(RULES))
    assert code == 2 and "<stdin>: an AdmissionReview" in err, err


def test_export_table_gives_each_reason_once(cli: CLI) -> None:
    code, out, err = cli("export", "--rules", str(RULES), "--table")
    assert code == 0 and "| priority-class-allowed | **no** |" in out
    assert "gpu-webhook export: priority-class-allowed" not in err  # its reason is in its row
    assert err.splitlines()[-1].startswith("gpu-webhook export: ") and "kept by the webhook" in err
    code, _, err = cli("export", "--rules", str(RULES))
    assert "gpu-webhook export: priority-class-allowed: " in err  # without the table, stderr is where it is said


def test_metrics_have_no_created_series() -> None:
    from webhook.server.metrics import Metrics

    metrics = Metrics()
    metrics.observe("mutate", "CREATE", "Pod", "allowed", 0.001)
    metrics.rule_errors.labels("r").inc()
    text = metrics.render().decode()
    assert "_created" not in text
    assert "gpu_webhook_requests_total{" in text and "gpu_webhook_request_duration_seconds_bucket{" in text


def test_the_readme_audit_of_the_examples_is_quiet(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's first audit command, as written (the shell's glob expanded), warns about nothing."""
    readme = (REPO / "README.md").read_text()
    (command,) = [
        line.split("  #")[0].split()
        for line in readme.splitlines()
        if line.startswith(".venv/bin/gpu-webhook audit examples")
    ]
    monkeypatch.chdir(REPO)
    argv = [name for word in command[1:] for name in (sorted(glob.glob(word)) if "*" in word else [word])]
    code, out, err = cli(*argv, "--rules", str(RULES))
    assert code in (0, 1) and out
    assert [line for line in err.splitlines() if not re.match(r"gpu-webhook: \d+ rules from ", line)] == []
