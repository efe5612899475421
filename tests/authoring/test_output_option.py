"""-o/--output names a format in every command, a row of the command's table in webhook.audit.formats;
a file to write is --out FILE, and `export -o FILE` still writes FILE, saying on stderr that it is deprecated."""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.authoring.test_cli import subcommands
from webhook.audit.formats import AUDIT, EXPORT, LINT, TEST, Formats
from webhook.cli import main

ROOT = Path(__file__).resolve().parents[2]
BASIC_RULES = str(ROOT / "tests" / "fixtures" / "rules-basic")
SITE = str(ROOT / "examples" / "site")
POD = str(ROOT / "examples" / "pod-notebook.yaml")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _output_option(command: str) -> argparse.Action:
    (action,) = [a for a in subcommands()[command]._actions if "--output" in a.option_strings]
    return action


@pytest.mark.parametrize(("command", "table"), [("audit", AUDIT), ("test", TEST), ("lint", LINT)])
def test_each_commands_output_offers_its_table(command: str, table: Formats) -> None:
    action = _output_option(command)
    assert action.option_strings == ["-o", "--output"]
    assert tuple(action.choices or ()) == tuple(table)


def test_every_row_of_every_table_names_a_factory_that_exists() -> None:
    for table in (AUDIT, TEST, LINT, EXPORT):
        for name, row in table.items():
            module, _, attribute = row.factory.partition(":")
            assert callable(getattr(__import__(module, fromlist=[attribute]), attribute)), name


def test_audit_output_picks_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "audit", "--rules", BASIC_RULES, POD, "-o", "junit")
    assert code in (0, 1) and ElementTree.fromstring(out.encode()).get("name") == "gpu-webhook audit"
    code, out, _ = cli(capsys, "audit", "--rules", BASIC_RULES, POD, "--output", "json")
    assert out.startswith('{"objects":[')


def test_test_output_text_and_junit(capsys: pytest.CaptureFixture[str]) -> None:
    suites = str(Path(SITE) / "tests")
    code, text, _ = cli(capsys, "test", "--site", SITE, suites, "-o", "text")
    assert code == 0 and text.splitlines()[-1] == "4 passed, 0 failed"
    default = cli(capsys, "test", "--site", SITE, suites)
    assert default[1].splitlines() == text.splitlines() and default[0] == 0
    code, xml, _ = cli(capsys, "test", "--site", SITE, suites, "--output", "junit")
    root = ElementTree.fromstring(xml.encode())
    assert code == 0 and (root.get("name"), root.get("tests"), root.get("failures")) == ("gpu-webhook test", "4", "0")


def test_lint_takes_its_formats(capsys: pytest.CaptureFixture[str]) -> None:
    given = cli(capsys, "lint", BASIC_RULES, "-o", "text")
    assert given == cli(capsys, "lint", BASIC_RULES)
    assert given[0] == 0 and given[1].endswith(": no problems\n")
    code, xml, _ = cli(capsys, "lint", BASIC_RULES, "--output", "junit")
    (case,) = ElementTree.fromstring(xml.encode()).iter("testcase")
    assert code == 0 and case.get("name") == given[1].strip() and not list(case)
    with pytest.raises(SystemExit) as refused:
        main(["lint", BASIC_RULES, "-o", "html"])
    assert refused.value.code == 2
    assert "invalid choice: 'html'" in capsys.readouterr().err


def test_export_writes_to_out_and_o_names_its_format(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, policies, err = cli(capsys, "export", "--rules", BASIC_RULES)
    assert code == 0 and "deprecated" not in err
    assert cli(capsys, "export", "--rules", BASIC_RULES, "-o", "yaml")[1] == policies
    table = cli(capsys, "export", "--rules", BASIC_RULES, "--table")[1]
    assert cli(capsys, "export", "--rules", BASIC_RULES, "--output", "table")[1] == table != policies
    out = tmp_path / "native.yaml"
    code, printed, err = cli(capsys, "export", "--rules", BASIC_RULES, "--out", str(out))
    assert code == 0 and printed == "" and out.read_text() == policies and "deprecated" not in err
    code, _, err = cli(capsys, "export", "--rules", BASIC_RULES, "--table", "--out", str(out))
    assert code == 0 and out.read_text() == table


def test_export_o_file_still_writes_it_and_says_it_is_deprecated(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policies = cli(capsys, "export", "--rules", BASIC_RULES)[1]
    out = tmp_path / "native.yaml"
    code, printed, err = cli(capsys, "export", "--rules", BASIC_RULES, "-o", str(out))
    assert code == 0 and printed == "" and out.read_text() == policies
    deprecations = [line for line in err.splitlines() if "deprecated" in line]
    assert deprecations == [
        f"gpu-webhook export: warning: -o/--output FILE is deprecated: write --out {out} (-o names a format: yaml, table)"
    ]
    # a file named by both is a usage error, not a guess
    code, _, err = cli(capsys, "export", "--rules", BASIC_RULES, "-o", str(out), "--out", str(tmp_path / "other.yaml"))
    assert code == 2 and "--out names the file" in err


def test_lint_junit_has_a_failing_case_per_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rule = tmp_path / "bad.yaml"
    rule.write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: bad}\nspec:\n  action: Deny\n"
        "  match: {kinds: [Pod], operatons: [CREATE]}\n  validate: {expression: 'true', message: x}\n"
    )
    code, text, err = cli(capsys, "lint", str(rule))
    assert code == 1 and err.endswith("1 error\n")
    code, xml, err = cli(capsys, "lint", str(rule), "-o", "junit")
    assert code == 1 and err.endswith("1 error\n")
    (suite,) = ElementTree.fromstring(xml.encode()).iter("testsuite")
    (failure,) = suite.iter("failure")
    assert suite.get("name") == str(rule) and failure.text == text.strip() and failure.get("type") == "lint"
