"""Mixed mode: each rule runs in exactly one place, the apiserver (exported) or the webhook (the rest).

`manifests --native` (owned by webhook/commands/manifests.py) is meant to call
`webhook_files(data, exported_rule_names(ruleset, target, release))` on the rules ConfigMap's
data and append `export(ruleset, target, release).objects` to its documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import yaml

from webhook.engine import POLICY_KIND
from webhook.kubeyaml import plain_documents


def webhook_files(data: Mapping[str, str], exported: Iterable[str]) -> dict[str, str]:
    """The ConfigMap data (file name -> text) without the documents of exported rules.

    A file none of whose rules is exported is kept byte for byte (comments included); a file
    that loses some is re-written without them; a file that loses all its rules is dropped.
    """
    names = set(exported)
    out: dict[str, str] = {}
    for key, text in data.items():
        documents = [d for d in plain_documents(text) if d is not None]
        kept = [d for d in documents if not _exported(d, names)]
        if len(kept) == len(documents):
            out[key] = text
        elif any(isinstance(d, Mapping) and d.get("kind") == POLICY_KIND for d in kept):
            out[key] = yaml.safe_dump_all(kept, sort_keys=False)
    return out


def _exported(document: object, names: set[str]) -> bool:
    if not isinstance(document, Mapping) or document.get("kind") != POLICY_KIND:
        return False
    metadata = document.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get("name") in names
