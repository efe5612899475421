"""The command line as a whole: --version, a description for every command, defaults in --help, one
spelling for shared options."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

from webhook.cli import COMMANDS, build_parser


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_version():
    result = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and result.stdout.startswith("gpu-webhook 0.")


def test_every_command_has_a_description_and_shows_its_defaults():
    commands = subcommands()
    assert set(COMMANDS) <= set(commands)
    for name, parser in commands.items():
        assert parser.description and len(parser.description) > 20, name
        text = re.sub(r"-\s+", "-", " ".join(parser.format_help().split()))  # unwrapped
        for action in parser._actions:
            shown = action.default not in (None, False, True, [], argparse.SUPPRESS)
            if action.option_strings and shown and action.help not in (None, argparse.SUPPRESS) and action.nargs != 0:
                # the default is shown, by the formatter or by the help text itself
                assert "default" in (action.help or "").lower() or str(action.default) in text, (name, action.dest)
                assert "(default" in text or "default:" in text, name


def test_shared_options_have_one_spelling():
    for name, parser in subcommands().items():
        options = {o for a in parser._actions for o in a.option_strings}
        assert "--namespace-object" not in options, name  # only --namespace-objects
        if "--output" in options:
            assert "-o" in options, f"{name}: --output without -o"
        if "--namespace" in options and name in ("audit", "explain"):
            assert "-n" in options, name


def test_every_command_that_takes_rules_merges_repeated_rules():
    """`--rules A --rules B` uses both everywhere (a store action would keep B alone, silently)."""
    commands = subcommands()
    for name in ("serve", "audit", "test", "explain", "export", "manifests"):
        (rules,) = [a for a in commands[name]._actions if "--rules" in a.option_strings]
        assert isinstance(rules, argparse._AppendAction), name
        assert rules.help and rules.help.startswith("rule file or directory; repeat to use"), name
        if name != "test":  # whose default is the suite's own rules
            assert "else the rule pack installed with gpu-webhook" in rules.help, name
