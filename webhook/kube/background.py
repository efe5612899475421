"""A daemon thread a component runs beside the event loop (status writes, registration checks):
started once, stopped by an event its loop waits on, so stop() ends it between passes."""

from __future__ import annotations

import threading


class BackgroundThread:
    """Subclasses define `_run`, whose loop waits on `self._stopping` (`while not self._stopping.wait(...)`)."""

    thread_name = "background"

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        raise NotImplementedError
