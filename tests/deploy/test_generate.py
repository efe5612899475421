"""`python -m webhook.commands.generate`: the entry point that regenerates the derived files prints them as committed."""

from __future__ import annotations

import pytest

from tests.support import REPO
from webhook.commands.generate import main


@pytest.mark.parametrize(("file", "committed"), [("crds", "crds.yaml"), ("registration", "webhooks.yaml")])
def test_generate_prints_the_committed_file(file: str, committed: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([file]) == 0
    assert capsys.readouterr().out == (REPO / "manifests" / "base" / committed).read_text()


def test_generate_names_what_it_can_generate(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["chart"])
    assert done.value.code == 2
    assert "crds" in capsys.readouterr().err
