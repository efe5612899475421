"""Mixed mode: each rule runs in exactly one place, the apiserver (exported) or the webhook (the rest).

`manifests --native` (owned by webhook/commands/manifests.py) is meant to call
`webhook_files(data, exported_rule_names(ruleset, target, release))` on the rules ConfigMap's
data and append `export(ruleset, target, release).objects` to its documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from webhook.engine.documents import OVERLAY_KIND, POLICY_KIND
from webhook.kubeyaml import plain_documents, styles


def webhook_files(data: Mapping[str, str], exported: Iterable[str]) -> dict[str, str]:
    """The ConfigMap data (file name -> text) without the documents of exported rules.

    A file none of whose rules is exported is kept byte for byte (comments included); a file
    that loses some is re-written without them; a file that loses all its rules is dropped.
    A GPUPolicyOverlay loses its entries for exported rules (the one that made a rule not exceptable
    so it exports, webhook.export.EXCEPTABLE): the webhook would refuse an overlay naming a rule it
    does not have. An overlay left with no entry goes too.
    """
    names = set(exported)
    out: dict[str, str] = {}
    for key, text in data.items():
        documents = [d for d in plain_documents(text) if d is not None]
        kept = [_without(d, names) for d in documents if not _exported(d, names)]
        kept = [d for d in kept if d is not None]
        if kept == documents:
            out[key] = text
        elif any(isinstance(d, Mapping) and d.get("kind") in (POLICY_KIND, OVERLAY_KIND) for d in kept):
            out[key] = styles.RULE_FILES.dump_all(kept)
    return out


def _without(document: object, names: set[str]) -> object | None:
    """An overlay without its entries for `names` (None when none is left); any other document as it is."""
    if not isinstance(document, Mapping) or document.get("kind") != OVERLAY_KIND:
        return document
    spec = document.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("rules"), list):
        return document
    entries = spec["rules"]
    left = [e for e in entries if not (isinstance(e, Mapping) and e.get("name") in names)]
    if len(left) == len(entries):
        return document
    return {**document, "spec": {**spec, "rules": left}} if left else None


def _exported(document: object, names: set[str]) -> bool:
    if not isinstance(document, Mapping) or document.get("kind") != POLICY_KIND:
        return False
    metadata = document.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get("name") in names
