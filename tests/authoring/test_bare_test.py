"""Bare `gpu-webhook test` runs the rule pack's own suites (the default rules: $GPU_WEBHOOK_RULES, else the
installed pack) instead of asking for a PATH."""

from __future__ import annotations

import shutil

from tests.authoring.conftest import RULES


def test_bare_test_runs_the_default_packs_suites(cli, monkeypatch, tmp_path):
    pack = tmp_path / "pack"
    shutil.copytree(RULES, pack)
    for suite in (pack / "tests").glob("*.test.yaml"):
        if suite.name != "gpu-toleration.test.yaml":
            suite.unlink()
    monkeypatch.setenv("GPU_WEBHOOK_RULES", str(pack))
    code, out, _ = cli("test")
    assert code == 0, out
    assert "gpu-toleration.test.yaml::" in out and " passed, 0 failed" in out
    assert "visible-devices-void.test.yaml" not in out  # the default pack's, not the checkout's
