"""The README's end-to-end command skips, with one line saying why, when KUBEBUILDER_ASSETS is unset or
names a folder without the binaries (tests/support/envtest.py skip_reason)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.envtest import ASSETS_ENV, skip_reason


def test_unset_or_empty_assets_skip_with_the_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ASSETS_ENV, raising=False)
    assert skip_reason() is not None and "is unset" in skip_reason()  # type: ignore[operator]
    monkeypatch.setenv(ASSETS_ENV, str(tmp_path))
    reason = skip_reason()
    assert reason is not None and f"{ASSETS_ENV}={tmp_path}: no executable kube-apiserver there" in reason
    assert "\n" not in reason


def test_a_folder_with_the_binaries_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("kube-apiserver", "etcd"):
        binary = tmp_path / name
        binary.write_text("#!/bin/sh\n")
        os.chmod(binary, 0o755)
    monkeypatch.setenv(ASSETS_ENV, str(tmp_path))
    assert skip_reason() is None
