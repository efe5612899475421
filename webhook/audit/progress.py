"""A progress bar on stderr for audit runs (webhook.audit.run.Progress), when stderr is a terminal.

rich draws it; nothing is imported or drawn in CI logs and pipes, so stdout stays the report alone.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any


class ProgressBar:
    """A rich progress bar on stderr when it is a terminal; silent otherwise (CI logs, pipes)."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None
        self.kind = "objects"
        self.expected = 0

    def start(self) -> None:
        if not sys.stderr.isatty():
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("auditing objects", total=None)

    def page(self, kind: str, count: int, remaining: int | None) -> None:
        if self.bar is None:
            return
        if kind != self.kind:
            self.kind, self.expected = kind, 0
        # remainingItemCount makes the total known after the first page of each kind
        self.expected += count
        done = self.bar.tasks[0].completed
        total = done + self.expected + (remaining or 0) if remaining is not None else None
        self.bar.update(self.task, description=f"auditing {kind}s", total=total)

    def advance(self) -> None:
        if self.bar is not None:
            self.expected -= 1
            self.bar.advance(self.task)

    def note(self, message: str) -> None:
        if self.bar is not None:
            self.bar.console.print(message, style="dim")

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@contextlib.contextmanager
def progress_bar() -> Iterator[ProgressBar]:
    progress = ProgressBar()
    progress.start()
    try:
        yield progress
    finally:
        progress.stop()
