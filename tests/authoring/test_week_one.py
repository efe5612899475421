"""Issue 29, "a new admin's week one without surprises": what the README, the docs and the commands' own
words promise is what the commands do."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.authoring.conftest import REPO
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
    assert exit_.value.code == 0 and out == f"gpu-webhook {version()}\n"  # the program's version, nothing about the rules
    readme = " ".join((REPO / "README.md").read_text().split())
    (claim,) = re.findall(r"`gpu-webhook --version` [^;]*", readme)
    assert f"`{out.strip()}`" in claim and "not the rules" in claim, claim


def test_help_names_what_is_there() -> None:
    helps = {name: " ".join(p.format_help().split()) for name, p in _subcommands().items()}
    assert not re.search(r"\brepo(sitory)?'s\b|\brepo\b", helps["serve"]), helps["serve"]  # installed, the default is the pack inside the package
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
