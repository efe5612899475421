"""The program's version and the rule pack's digest: what `--version`, the build-info metric and the
start-up log line say, so an admin can tell which engine runs which pack.

The version comes from git through setuptools-scm at build time (pyproject.toml
`[tool.setuptools_scm]`): a release tag `vX.Y.Z` gives `X.Y.Z`, N commits after it
`X.Y.(Z+1).devN+gHASH`. The installed distribution's metadata carries it; a checkout run without
installing falls back to the `webhook/_version.py` setuptools-scm writes, else "unknown".

Standard library only: `--version` imports this and no machinery (tests/authoring/test_cli_startup.py).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

DISTRIBUTION = "gpu-webhook"
UNKNOWN = "unknown"
RULE_SUFFIXES = (".yaml", ".yml")
# A file whose documents are all GPUPolicyTest suites is not part of the pack the cluster runs:
# `gpu-webhook manifests` leaves such files out of the rules ConfigMap, so the digest does too.
_KIND = re.compile(r"^kind:\s*['\"]?([A-Za-z0-9]+)", re.MULTILINE)
_TEST_KIND = "GPUPolicyTest"


def installed_version() -> str:
    """The version of the gpu-webhook distribution installed now (read from disk on each call)."""
    from importlib import metadata

    try:
        found = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        try:
            from webhook._version import version  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            return UNKNOWN
        return str(version)
    except (OSError, ValueError, UnicodeError):  # a dist-info half written or unreadable (an upgrade under way)
        return UNKNOWN
    return found or UNKNOWN  # a METADATA without its Version field


def pack_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The rule files under `paths` that a cluster would load (test-suite-only files left out), sorted."""
    found: list[str] = []
    for path in paths:
        root = Path(path)
        if root.is_file():
            candidates = [root]
        else:
            candidates = [
                Path(directory) / name
                for directory, dirs, names in os.walk(root, followlinks=True)
                if not any(part.startswith(".") for part in Path(directory).relative_to(root).parts)
                for name in names
                if name.endswith(RULE_SUFFIXES)
            ]
        found.extend(str(file) for file in candidates if not _only_test_suites(file))
    return sorted(dict.fromkeys(found))


def pack_digest(paths: Iterable[str | os.PathLike[str]]) -> str:
    """sha256 of the pack's rule files' contents, independent of their names and places.

    A ConfigMap mount flattens `rules/tests/x.yaml` into `tests_x.yaml`: the same pack in a
    checkout, in the wheel and in the cluster has one digest. The first 12 hex digits are shown.
    """
    contents = sorted(hashlib.sha256(Path(file).read_bytes()).hexdigest() for file in pack_files(paths))
    return hashlib.sha256("\n".join(contents).encode()).hexdigest()[:12]


def _only_test_suites(file: Path) -> bool:
    try:
        text = file.read_text(errors="replace")
    except OSError:
        return False
    kinds = set(_KIND.findall(text))
    return kinds == {_TEST_KIND}
