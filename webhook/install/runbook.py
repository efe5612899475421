"""The outage runbook: the kubectl commands that fail every webhook entry open, and close them again.

Generated from the registration's one table of entries (webhook/install/registration.py ENTRIES, in
the order `configurations` renders them), so a new entry is never left at `Fail` by a hand-written
index. One `kubectl patch --type=json` per configuration: for each entry a JSON Patch `test` of its
name at its index, then the `replace` of its failurePolicy. A configuration whose entries were
reordered or edited by hand therefore fails the whole patch (RFC 6902: a failed `test` applies
nothing) instead of opening the wrong entry; webhook configurations are never sent to admission
webhooks, so the commands work whatever state the webhook is in.

`gpu-webhook manifests --runbook` prints it; docs/operations.md §6 shows the same text (a test compares).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from webhook.install.registration import CONFIGURATION_NAMES, ENTRIES, MUTATING, VALIDATING

OPEN, CLOSED = "Ignore", "Fail"  # CLOSED: what `gpu-webhook manifests` renders (components/fail-closed)


def patches(failure_policy: str) -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    """(resource, name, JSON Patch) per configuration, setting every entry's failurePolicy."""
    for kind in (VALIDATING, MUTATING):
        operations: list[dict[str, Any]] = []
        for index, entry in enumerate(e for e in ENTRIES if e.configuration == kind):
            operations.append({"op": "test", "path": f"/webhooks/{index}/name", "value": entry.name})
            operations.append({"op": "replace", "path": f"/webhooks/{index}/failurePolicy", "value": failure_policy})
        yield kind.lower(), CONFIGURATION_NAMES[kind], operations


def commands(failure_policy: str) -> list[str]:
    """The kubectl lines, one per configuration (the patch in single quotes: it holds no quote)."""
    return [
        f"kubectl patch {resource} {name} --type=json -p '{json.dumps(patch, separators=(',', ':'))}'"
        for resource, name, patch in patches(failure_policy)
    ]


def entry_names() -> list[str]:
    return [e.name for kind in (VALIDATING, MUTATING) for e in ENTRIES if e.configuration == kind]


def runbook() -> str:
    """The Markdown of the fail-open step and of its reversal."""
    names = ", ".join(f"`{name}`" for name in entry_names())
    opening = "\n".join(commands(OPEN))
    closing = "\n".join(commands(CLOSED))
    return f"""Fail open: every entry of both configurations ({names}) to `{OPEN}`, effective at once:

```sh
{opening}
```

Close again once the webhook answers (`/readyz` 200 on every replica): every entry back to `{CLOSED}`,
as `gpu-webhook manifests` renders them (or re-apply the manifests):

```sh
{closing}
```
"""
