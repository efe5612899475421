"""Which engine runs which pack, and an engine that will not load a pack it was not built with.

`gpu_webhook_build_info{version, pack}` is 1 for the running program's version and the digest of the
rule pack in use (webhook/version.py); the pack label follows every successful reload.

The running version is read once, at start. An installation that changes under the process
(`pip install --upgrade` beside a running server) replaces the package's files but not the code in
memory: the old engine would hot-reload the new wheel's rule pack, whose rules may use what only
the new engine has. So before each reload the installed version is read again; when it differs,
the server says so (an error log naming both versions, `gpu_webhook_package_changed` 1) and refuses
to reload rule files that live inside the installed package: the last good rules keep serving
until a restart runs the engine they came with. Rules from elsewhere (a ConfigMap mount, --rules
DIR) are the admin's and still reload.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

import webhook
from webhook.version import installed_version, pack_digest

log = logging.getLogger("gpu_webhook.build")
PACKAGE_DIR = Path(webhook.__file__).resolve().parent


class BuildGuard:
    """The running build's facts and the reload check (RuleStore calls `refusal` and `loaded`)."""

    def __init__(self, registry: CollectorRegistry, version: str | None = None) -> None:
        self.version = version if version is not None else installed_version()
        self.pack = ""
        self.installed = self.version
        self.info = Gauge(
            "gpu_webhook_build_info",
            "1 for the running program's version and the digest of the rule pack in use.",
            ["version", "pack"],
            registry=registry,
        )
        self.changed = Gauge(
            "gpu_webhook_package_changed",
            "1 when the installed gpu-webhook package is not the running one (restart to run it); "
            "its rule pack is then not reloaded.",
            registry=registry,
        )

    def loaded(self, paths: list[str]) -> None:
        """After a successful load: the pack label names the files now in use."""
        try:
            pack = pack_digest(paths)
        except OSError:
            pack = "unreadable"
        if pack == self.pack:
            return
        if self.pack:
            self.info.remove(self.version, self.pack)
        self.pack = pack
        self.info.labels(self.version, pack).set(1)

    def refusal(self, paths: list[str]) -> str | None:
        """Why the rule files at `paths` must not be reloaded now, or None."""
        installed = installed_version()
        if installed != self.installed:
            self.installed = installed
            self.changed.set(float(installed != self.version))
            if installed != self.version:
                log.error(
                    "the installed gpu-webhook changed under the running server: restart to run it",
                    extra={"running": self.version, "installed": installed},
                )
        if installed == self.version:
            return None
        packaged = [p for p in paths if _inside(Path(p), PACKAGE_DIR)]
        if not packaged:
            return None
        return (
            f"the rule pack at {', '.join(packaged)} belongs to the installed gpu-webhook {installed}, not to this "
            f"engine ({self.version}): not reloaded; the last good rules keep serving until a restart"
        )


def _inside(path: Path, directory: Path) -> bool:
    try:
        return Path(os.path.realpath(path)).is_relative_to(directory)
    except OSError:
        return False
