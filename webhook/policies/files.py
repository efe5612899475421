"""The rule files' documents, read and parsed once per content, for the loads that add policy objects to them.

A change of one GPUPolicy or overlay loads every rule again (the one loader, webhook/policies/isolation.py),
and an isolated load may run the loader several times. Reading and parsing the pack's YAML with
positions is about half of such a load (bench/policy_scale.py), while the files rarely change: their
documents are kept, keyed by the files' fingerprint (resolved path, inode, size, mtime: what the server's
reload watches, webhook/server/reload.py), and handed to the loader as documents. Whenever a path is
missing or a file does not read, the loader reads the paths itself, so every error is the loader's own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from webhook.engine import LoadResult, load_rules, rule_files
from webhook.engine.documents import TEST_KIND
from webhook.kubeyaml import Document, YamlError, load_documents

Fingerprint = tuple[tuple[str, int, int, int], ...]
_SUITES = frozenset({TEST_KIND})  # test suites beside the rules: the loader skips them too


def fingerprint(files: Iterable[str]) -> Fingerprint:
    """What identifies the current content: resolved path, inode, size and mtime of each file."""
    entries = []
    for path in files:
        try:
            real = os.path.realpath(path)
            stat = os.stat(real)
        except OSError:
            continue
        entries.append((real, stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(entries)


class RuleFiles:
    """The rule files under `paths`, parsed once per fingerprint; `load` compiles them with documents."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.reads = 0  # times the files were read and parsed (tests, and the bench)
        self._fingerprint: Fingerprint | None = None
        self._files: list[str] = []
        self._documents: list[Document] | None = None  # None: a path is missing or a file does not read

    def load(self, objects: Iterable[Document], absent: Iterable[str] = ()) -> LoadResult:
        """What `load_rules(paths, objects, absent)` gives, the files parsed only when they changed."""
        objects, absent = list(objects), list(absent)
        documents = self._current() if objects or absent else None
        if documents is None:  # the files alone (read once anyway), or a path or file the loader must report
            return load_rules(self.paths, objects, absent)
        result = load_rules([], [*documents, *objects], absent)
        result.files = list(self._files)
        return result

    def _current(self) -> list[Document] | None:
        if not all(os.path.exists(path) for path in self.paths):
            return None
        files = rule_files(self.paths)
        now = fingerprint(files)
        if now != self._fingerprint or len(now) != len(files):
            self._fingerprint, self._files, self._documents = now, files, _read(files)
            self.reads += 1
        return self._documents


def _read(files: list[str]) -> list[Document] | None:
    documents: list[Document] = []
    for file in files:
        try:
            documents.extend(load_documents(Path(file).read_text(encoding="utf-8"), file, skip_kinds=_SUITES))
        except (YamlError, OSError, UnicodeDecodeError):
            return None
    return documents
