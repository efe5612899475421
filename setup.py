"""Ships the top-level rules/ and manifests/ inside the wheel as webhook/data/{rules,manifests}.

They stay at the top of the repository (where people read and edit them, and where the
Dockerfile and CI use them); `pip install .` copies them into the package at build time, so an
installed gpu-webhook finds its default rule pack and renders its manifests outside a checkout.
It also gives the version a fallback: setuptools-scm reads it from git (or an sdist's PKG-INFO);
a tree with neither, and no SETUPTOOLS_SCM_PRETEND_VERSION, builds as version 0+unknown, said
on stderr, rather than failing or claiming a release it is not.
Everything else about the project is in pyproject.toml.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PACKAGED = ("rules", "manifests")
FALLBACK_VERSION = "0+unknown"
PRETEND = "SETUPTOOLS_SCM_PRETEND_VERSION"


def fall_back_without_git() -> None:
    if os.environ.get(PRETEND) or (ROOT / ".git").exists() or (ROOT / "PKG-INFO").exists():
        return
    print(f"gpu-webhook: no git metadata and no {PRETEND}: building as version {FALLBACK_VERSION}", file=sys.stderr)
    os.environ[PRETEND] = FALLBACK_VERSION


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        for name in PACKAGED:
            source = ROOT / name
            if not source.is_dir():  # a wheel without its rule pack would fail later, far from here
                raise SystemExit(f"cannot build gpu-webhook: {source} is missing (build from a full checkout)")
            target = Path(self.build_lib) / "webhook" / "data" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.crt", "*.key"))


fall_back_without_git()
setup(cmdclass={"build_py": BuildWithData})
