"""The wheel built from this checkout, as `pip wheel` builds it: what the install tests put in a fresh
venv (test_installed_wheel.py) or under `pip install --target` (test_runtime_layout.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.server import REPO


def build_wheel(dist: Path) -> Path:
    """Build gpu-webhook's wheel into `dist` (no dependencies) and return its path."""
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("gpu_webhook-*.whl")
    return wheel
