"""GPUPolicyOverlay: a site's changes to rules of the pack, applied to the documents before compiling.

A site keeps the shipped pack as it is and says what differs in overlays: a rule turned off
(`enabled: false`), its action, failurePolicy, onMissingContext or exceptable set, a param's
value replaced, or its match namespaces/selectors replaced. Because overlays rewrite the rule
documents before the loader compiles them, every door sees the overlaid rules: lint, test,
explain, audit, export, the registration and the server.

An overlay that names a rule or a param the pack does not have is a LoadError at the overlay
(after an upgrade: a rule renamed or removed, a param dropped), and so is a field two overlays
both set: which one wins would be a silent choice.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from webhook.kubeyaml import Document

from .policy import LoadError, SourceLocation
from .schema import OVERLAY_KIND

# overlay fields copied onto the rule's spec as they are
SPEC_FIELDS = ("action", "failurePolicy", "onMissingContext", "exceptable")
MATCH_FIELDS = ("namespaces", "namespaceSelector", "objectSelector")
# the annotation that says, on an overlaid rule, which overlays changed what (explain shows it)
OVERLAID_BY = "gpu-webhook.io/overlaid-by"


def apply_overlays(
    policies: list[Document], overlays: list[Document], errors: list[LoadError], known: frozenset[str] = frozenset()
) -> list[Document]:
    """The policy documents with every overlay applied, in their order; a disabled rule left out.

    `policies` and `overlays` are schema-checked documents. `known` adds rule names that exist
    but are not in `policies` (a rule whose own document has errors, already reported), so an
    overlay on it is not reported as naming a missing rule too. Problems go to `errors`.
    """
    by_name = {_name(document): index for index, document in enumerate(policies)}
    changed: dict[int, dict[str, Any]] = {}  # policy index -> its overlaid data
    notes: dict[int, list[str]] = {}  # policy index -> "overlay: field, field"
    setters: dict[tuple[str, str], str] = {}  # (rule, field) -> the overlay that set it
    disabled: set[int] = set()
    seen_overlays: dict[str, SourceLocation] = {}
    for overlay in overlays:
        overlay_name = _name(overlay)
        where = _location(overlay, ())
        if overlay_name in seen_overlays:
            errors.append(
                LoadError(
                    where, f"{OVERLAY_KIND} {overlay_name}: duplicate name (first at {seen_overlays[overlay_name]})"
                )
            )
            continue
        seen_overlays[overlay_name] = where
        for position, entry in enumerate(overlay.data["spec"]["rules"]):
            path = ("spec", "rules", position)
            rule = entry["name"]
            index = by_name.get(rule)
            if index is None:
                if rule not in known:
                    hint = difflib.get_close_matches(rule, list(by_name), n=1)
                    suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
                    errors.append(
                        LoadError(
                            _location(overlay, (*path, "name")),
                            f"{OVERLAY_KIND} {overlay_name}: no rule named {rule!r} in the rules loaded{suffix}",
                        )
                    )
                continue
            data = changed.get(index)
            if data is None:
                data = changed[index] = copy.deepcopy(policies[index].data)
            spec = data["spec"]
            fields = _fields(entry, spec, overlay, path, errors)
            if fields is None:
                continue
            clashes = [f for f in fields if (rule, f) in setters]
            if clashes:
                errors.append(
                    LoadError(
                        _location(overlay, path),
                        f"{OVERLAY_KIND} {overlay_name}: rule {rule!r}: {', '.join(clashes)} also set by "
                        f"{OVERLAY_KIND} {setters[(rule, clashes[0])]}; one overlay per field",
                    )
                )
                continue
            for field_name in fields:
                setters[(rule, field_name)] = overlay_name
            if entry.get("enabled") is False:
                disabled.add(index)
            for key in SPEC_FIELDS:
                if key in entry:
                    spec[key] = entry[key]
            for key, value in (entry.get("params") or {}).items():
                spec["params"][key] = copy.deepcopy(value)
            for key, value in (entry.get("match") or {}).items():
                spec["match"][key] = copy.deepcopy(value)
            notes.setdefault(index, []).append(f"{overlay_name} ({', '.join(fields)})")
    out = []
    for index, document in enumerate(policies):
        if index in disabled:
            continue
        data = changed.get(index)
        if data is None or index not in notes:
            out.append(document)
            continue
        annotations = data["metadata"].setdefault("annotations", {})
        annotations[OVERLAID_BY] = "; ".join(notes[index])
        out.append(replace(document, data=data))  # positions stay the rule file's: errors point at the rule
    return out


def _fields(
    entry: Mapping[str, Any], spec: Mapping[str, Any], overlay: Document, path: tuple[Any, ...], errors: list[LoadError]
) -> list[str] | None:
    """The rule fields an overlay entry sets (params.NAME, match.FIELD, action, ...); None (and the
    problem in `errors`) when it names a param the rule does not have."""
    fields = [key for key in ("enabled", *SPEC_FIELDS) if key in entry]
    params = entry.get("params") or {}
    have = spec.get("params") or {}
    missing = [name for name in params if name not in have]
    if missing:
        for name in missing:
            hint = difflib.get_close_matches(str(name), list(have), n=1)
            suffix = f" (did you mean {hint[0]!r}?)" if hint else f" (its params: {', '.join(have) or 'none'})"
            errors.append(
                LoadError(
                    _location(overlay, (*path, "params", name), key=True),
                    f"{OVERLAY_KIND} {_name(overlay)}: rule {entry['name']!r} has no param {name!r}{suffix}",
                )
            )
        return None
    fields.extend(f"params.{name}" for name in params)
    fields.extend(f"match.{name}" for name in entry.get("match") or {})
    return fields


def _name(document: Document) -> str:
    return str(document.data["metadata"]["name"])


def _location(document: Document, path: tuple[Any, ...], key: bool = False) -> SourceLocation:
    line, column = document.position(path, key=key)
    return SourceLocation(document.file, line, column)
