"""The JSON Schemas shipped in the package (webhook/schemas/*.json), rendered from the engine's SCHEMAS.

The loader validates with those Python dicts (`webhook.engine.SCHEMAS`); the shipped files
are the same dicts written out for editors (yaml-language-server), and a test keeps
them in sync. Add a modeline to the first line of a rule file:

    # yaml-language-server: $schema=https://.../gpupolicy.json   (or a relative path)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from webhook.engine.documents import CONFIG_KIND, EXCEPTION_KIND, OVERLAY_KIND, POLICY_KIND, SCHEMAS, TEST_KIND

SHIPPED = Path(__file__).resolve().parents[1] / "schemas"
FILES = {
    POLICY_KIND: "gpupolicy.json",
    TEST_KIND: "gpupolicytest.json",
    CONFIG_KIND: "gpuwebhookconfig.json",
    OVERLAY_KIND: "gpupolicyoverlay.json",
    EXCEPTION_KIND: "gpupolicyexception.json",
}


def render(kind: str) -> str:
    schema: dict[str, Any] = SCHEMAS[kind]
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


def write(directory: str | Path) -> list[Path]:
    """Write every schema to directory; returns the files written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, name in FILES.items():
        path = directory / name
        path.write_text(render(kind), encoding="utf-8")
        written.append(path)
    return written
