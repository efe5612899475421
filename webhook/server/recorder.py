"""`serve --record-reviews DIR`: write the AdmissionReviews the server receives to files (a debugging aid).

What an apiserver really sends (defaulted objects, managedFields, userInfo, options) is what the
bench's reviews imitate (tests/support/apiserver.py); recording a few from a live cluster checks that
imitation, and replays a problem request with `gpu-webhook explain`/`test`. The bodies are
written as received: they hold whatever the objects hold (environment values, annotations,
user names and groups), so record in a test cluster or for a short while, keep the directory
private (files are created 0600), and delete it afterwards.

Bounded: at most `max_files` files and `max_bytes` bytes in all per process, then recording
stops by itself (one log line says so). Off by default; it costs nothing when off.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("gpu_webhook.server")

DEFAULT_MAX_FILES = 100
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class ReviewRecorder:
    def __init__(self, directory: Path, max_files: int = DEFAULT_MAX_FILES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = directory
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.files = 0
        self.bytes = 0
        self.stopped = False
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._prefix = f"{os.getpid()}-"  # workers share the directory

    def record(self, endpoint: str, body: bytes) -> None:
        """Write one body as `<pid>-<n>-<endpoint>.json`; never raises (the answer matters more)."""
        if self.stopped:
            return
        if self.files >= self.max_files or self.bytes + len(body) > self.max_bytes:
            self.stopped = True
            log.warning(
                "stopped recording AdmissionReviews: limit reached",
                extra={"directory": str(self.directory), "files": self.files, "bytes": self.bytes},
            )
            return
        path = self.directory / f"{self._prefix}{self.files + 1:05d}-{endpoint}.json"
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.write(body)
        except OSError as error:
            self.stopped = True
            log.warning("stopped recording AdmissionReviews", extra={"path": str(path), "error": str(error)})
            return
        self.files += 1
        self.bytes += len(body)
