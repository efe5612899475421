"""Shared helpers for the authoring tests: write rule files to tmp_path, run the CLI in-process."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from webhook.cli import main

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
# a small pinned rule set for tests of a command's layout and counts (tests/fixtures/README.md)
BASIC_RULES = REPO / "tests" / "fixtures" / "rules-basic"

HEADER = "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\n"


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    def write_file(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return write_file


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
