"""The guard that keeps CI from going green with the real parts skipped (tests/conftest.py calls it).

Tests that run against real components skip with one line when the binaries are absent, so a fresh
machine still passes the README's command. CI knows better: `.ci/run` sets `GPU_WEBHOOK_REQUIRE_REAL`
to the layers whose binaries it found (`envtest`, `cluster`, comma-separated), and then
- a skip of any test of such a layer is a failure that names the layer and the skip's reason;
- a run that covers a layer's directory but runs none of its tests fails (they were deselected,
  not collected, or removed);
- the terminal summary says, per layer, how many of its tests ran and how many skipped.
A test belongs to a layer by its directory, or, anywhere, by skipping with the layer's reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.envtest import SKIP_REASON as ENVTEST_SKIP_REASON

ENV = "GPU_WEBHOOK_REQUIRE_REAL"


@dataclass(frozen=True)
class Layer:
    name: str
    title: str  # as the summary line names it
    directory: str  # relative to the repository root
    skip_reason: str | None = None  # a skip with this reason, anywhere, is this layer's


LAYERS = {
    layer.name: layer
    for layer in (
        Layer("envtest", "real-apiserver tests", "tests/e2e", ENVTEST_SKIP_REASON),
        Layer("cluster", "whole-cluster tests", "tests/cluster"),
    )
}


@dataclass
class Tally:
    ran: set[str] = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)  # node id -> the skip's reason


class RealParts:
    """What one session required and saw, layer by layer."""

    def __init__(self, config: pytest.Config) -> None:
        self.root = Path(config.rootpath).resolve()
        invoked = Path(config.invocation_params.dir)
        self.required = required_layers(os.environ.get(ENV, ""))
        self.tally = {name: Tally() for name in LAYERS}
        args = [a.split("::")[0] for a in config.args] or ["."]
        self.in_scope = {
            name
            for name, layer in LAYERS.items()
            if (self.root / layer.directory).is_dir()
            and any(_covers(self.root, invoked / arg, layer.directory) for arg in args)
        }

    def layer_of(self, item_path: Path, reason: str) -> Layer | None:
        try:
            relative = item_path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            relative = ""
        for layer in LAYERS.values():
            if relative == layer.directory or relative.startswith(layer.directory + "/"):
                return layer
            if layer.skip_reason is not None and reason.startswith(layer.skip_reason):
                return layer
        return None

    def record(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """Count the report; a skip of a required layer becomes a failure that says why."""
        reason = _skip_reason(report) if report.skipped and not hasattr(report, "wasxfail") else ""
        layer = self.layer_of(Path(str(item.path)), reason)
        if layer is None:
            return
        tally = self.tally[layer.name]
        if reason:
            tally.skipped[item.nodeid] = reason
            if layer.name in self.required:
                report.outcome = "failed"
                report.longrepr = (
                    f"{ENV} requires the {layer.name} layer ({layer.title}), but this test skipped: {reason}"
                )
        elif report.when == "call":
            tally.ran.add(item.nodeid)

    def problems(self) -> list[str]:
        return [
            f"{ENV}={os.environ.get(ENV)}: no test of {LAYERS[name].directory} ran ({LAYERS[name].title})"
            for name in sorted(self.required & self.in_scope)
            if not self.tally[name].ran
        ]

    def summary(self) -> list[str]:
        lines = []
        for name, layer in LAYERS.items():
            tally = self.tally[name]
            if name in self.required or tally.ran or tally.skipped:
                need = " (required)" if name in self.required else ""
                lines.append(f"{layer.title}: {len(tally.ran)} ran, {len(tally.skipped)} skipped{need}")
        return lines


def required_layers(value: str) -> set[str]:
    names = {part.strip() for part in value.split(",") if part.strip()}
    unknown = names - set(LAYERS)
    if unknown:
        raise pytest.UsageError(f"{ENV}: unknown layer(s) {', '.join(sorted(unknown))}; known: {', '.join(LAYERS)}")
    return names


def _covers(root: Path, arg: Path, directory: str) -> bool:
    """Whether running `arg` (a path given to pytest) includes `directory` or part of it."""
    try:
        given = arg.resolve().relative_to(root).as_posix()
    except ValueError:
        return False
    given = "" if given == "." else given
    return not given or directory == given or directory.startswith(given + "/") or given.startswith(directory + "/")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)
