"""`gpu-webhook --help` and `--version` start without the machinery the commands run with.

Building the parser imports every command module (the help lists them all), so a command module
imports argparse and webhook.commands.common when it loads and its machinery when it runs
(webhook/cli.py). Guarded by what a fresh interpreter has imported, never by a timing: the
start-up figures are measured from outside the process, by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from webhook import cli

RULES = Path(__file__).resolve().parents[2] / "rules"

# what the commands run with; building the parser, --help and --version import none of it
HEAVY = (
    "aiohttp",
    "kubernetes",
    "cryptography",
    "jsonschema",
    "rich",
    "cel_expr_python",
    "yaml",
    "asyncio",
    "webhook.engine",
    "webhook.server",
    "webhook.export",
    "webhook.audit",
    "webhook.authoring",
    "webhook.certs",
    "webhook.install",
    "webhook.kube",
    "webhook.kubeyaml",
)

# the format tables every command's -o/--output lists: the standard library only (webhook.audit imports nothing)
FORMAT_TABLES = ("webhook.audit", "webhook.audit.formats")

# one fresh interpreter: each step's argv, then the modules that step imported (a JSON line on stderr)
STEPS = """
import json, sys
from webhook import cli
for argv in json.loads(sys.argv[1]):
    before = set(sys.modules)
    if argv is None:
        cli.build_parser()
    else:
        try:
            cli.main(argv)
        except SystemExit:
            pass
    print(json.dumps([argv, sorted(set(sys.modules) - before)]), file=sys.stderr)
"""


def imported(steps: list[list[str] | None]) -> dict[str, list[str]]:
    """For each step (None: build_parser() only, else cli.main(argv)), the modules it imported first."""
    done = subprocess.run(
        [sys.executable, "-c", STEPS, json.dumps(steps)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("[")]
    assert len(lines) == len(steps), done.stderr
    return {" ".join(argv) if argv is not None else "build_parser()": modules for argv, modules in lines}


def heavy(modules: list[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    return [m for m in modules if m not in FORMAT_TABLES and any(m == h or m.startswith(h + ".") for h in heavy)]


def test_the_parser_help_and_version_import_no_machinery() -> None:
    steps: list[list[str] | None] = [None, ["--help"], ["--version"], *([name, "--help"] for name in cli.COMMANDS)]
    every = imported(steps)
    # the first step builds the whole parser (every command module) from a fresh interpreter
    assert {f"webhook.commands.{name}" for name in cli.COMMANDS} <= set(every["build_parser()"])
    for step, modules in every.items():
        assert heavy(modules) == [], step
        ours = [m for m in modules if m.startswith("webhook.") and m != "webhook.cli"]
        # webhook.version (standard library only): what --version prints
        light = ("webhook.commands", "webhook.version", *FORMAT_TABLES)
        assert [m for m in ours if m not in light and not m.startswith("webhook.commands.")] == [], step


def test_help_and_version_alone_import_no_machinery() -> None:
    """Each from a fresh interpreter, as a user runs them (the test above builds the parser first)."""
    for argv in (["--help"], ["--version"], ["audit", "--help"], ["serve", "--help"]):
        (modules,) = imported([argv]).values()
        assert heavy(modules) == [], argv


def test_lint_imports_the_engine_but_not_the_server_the_cluster_or_the_exporter() -> None:
    (modules,) = imported([["lint", str(RULES / "gpu-cost-labels.yaml")]]).values()
    assert "webhook.authoring.lint" in modules  # it ran
    servers = ("aiohttp", "kubernetes", "cryptography", "rich", "webhook.server", "webhook.export", "webhook.audit")
    assert heavy(modules, servers) == []


def test_the_parsers_copies_equal_their_owners() -> None:
    """The values the parser shows are copies (their owners import the machinery): each equals its owner's."""
    import webhook.certs
    from webhook.authoring.schemas import FILES
    from webhook.commands import certs, common, export, schema, serve
    from webhook.engine import Mode
    from webhook.export import TARGETS
    from webhook.export.policies import CLAIMS_MODES, CLAIMS_REFUSE, CLAIMS_UNRESOLVED
    from webhook.export.versions import DEFAULT_VERSION

    for name in ("CA_FILE", "CERT_FILE", "KEY_FILE", "CA_KEY_FILE", "CA_DAYS", "SERVING_DAYS"):
        assert getattr(certs, name) == getattr(webhook.certs, name), name
    assert export.TARGETS == TARGETS
    assert (common.CLAIMS_MODES, common.CLAIMS_REFUSE, common.CLAIMS_UNRESOLVED) == (
        CLAIMS_MODES,
        CLAIMS_REFUSE,
        CLAIMS_UNRESOLVED,
    )
    assert common.DEFAULT_KUBERNETES_VERSION == DEFAULT_VERSION
    assert tuple(mode.value for mode in Mode) == serve.MODES
    assert tuple(FILES) == schema.KINDS


def test_a_module_a_command_imports_when_it_runs_missing_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "webhook.authoring.lint", None)  # `import` of it raises ImportError
    assert cli.main(["lint", str(RULES / "gpu-cost-labels.yaml")]) == 2
    err = capsys.readouterr().err
    assert "gpu-webhook: error: the `lint` command cannot run (ModuleNotFoundError: " in err
    assert "webhook.authoring.lint" in err and "reinstall gpu-webhook" in err and "Traceback" not in err
