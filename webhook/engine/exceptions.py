"""GPUPolicyException: objects of one namespace let through named rules, until an expiry.

An exception is data, checked per request: evaluate (evaluate.py) asks `excepting` once which
rules the object's exceptions cover, and a rule an exception covers neither denies nor patches; its outcome is
`Result.EXCEPTED` with the reason `excepted by <namespace>/<name>: <reason>`. The expiry is
compared with the admission's `now`, so an expired exception stops applying without a reload.

An exception applies only in its own namespace: whoever may create one in a namespace can exempt
that namespace's objects and no other (who may create them is RBAC's business, docs/day-two.md).
A rule with `spec.exceptable: false` is never excepted, whatever reached the cluster.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jsonschema import Draft202012Validator

from webhook.kubeyaml import Document

from .policy import LabelSelector, LoadError, RuleLoadError, SourceLocation
from .schema import EXCEPTION_KIND, EXCEPTION_SCHEMA, dotted, selector_of

EXCEPTION_VALIDATOR = Draft202012Validator(EXCEPTION_SCHEMA)
HINTS = 8  # unknown rule names of one exception that get a did-you-mean (~5 ms each with the pack)


@dataclass(frozen=True, slots=True)
class PolicyException:
    name: str
    namespace: str
    rules: frozenset[str]
    kinds: frozenset[str] = frozenset()  # empty: any kind
    names: frozenset[str] = frozenset()  # empty: any name
    selector: LabelSelector | None = None  # on the object's own labels
    expires: datetime | None = None  # aware; from this instant on it no longer applies
    reason: str = ""
    source: SourceLocation | None = None  # where it was read (a file, or the cluster object)

    @property
    def key(self) -> str:
        """namespace/name: how reports and the metric name it."""
        return f"{self.namespace}/{self.name}"

    @property
    def verdict(self) -> str:
        """The reason an excepted rule's outcome carries."""
        return f"excepted by {self.key}: {self.reason}"

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and now >= self.expires

    def covers(self, kind: str, name: str, namespace: str | None, labels: Mapping[str, Any] | None) -> bool:
        """Whether the object is one this exception names (whatever the rule and the time)."""
        return (
            namespace == self.namespace
            and (not self.kinds or kind in self.kinds)
            and (not self.names or name in self.names)
            and (self.selector is None or self.selector.matches(labels))
        )


def parse_exception(document: Document | Mapping[str, Any], origin: str | None = None) -> PolicyException:
    """A GPUPolicyException document -> PolicyException; RuleLoadError (its LoadErrors, located) if invalid.

    `document` is a located Document (files) or a plain mapping (a cluster object; `origin` then
    names where it came from in errors, by default `GPUPolicyException <namespace>/<name>`)."""
    problems = exception_problems(document, origin)
    if problems:
        raise RuleLoadError(problems)
    data = document.data if isinstance(document, Document) else document
    return _build(data, _where(document, origin, ()))


def exception_problems(document: Document | Mapping[str, Any], origin: str | None = None) -> list[LoadError]:
    """Every schema problem of a GPUPolicyException document, and an `expires` that is no RFC 3339 time."""
    data = document.data if isinstance(document, Document) else document
    prefix = f"{EXCEPTION_KIND} {_name(data) or '<unnamed>'}: "
    found = sorted(EXCEPTION_VALIDATOR.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    problems = [
        LoadError(
            _where(document, origin, tuple(e.absolute_path)),
            f"{prefix}{dotted(e.absolute_path) or 'document'}: {e.message}",
        )
        for e in found
    ]
    spec = data.get("spec") if isinstance(data, Mapping) else None
    expires = spec.get("expires") if isinstance(spec, Mapping) else None
    if isinstance(expires, str) and parse_time(expires) is None:
        problems.append(
            LoadError(
                _where(document, origin, ("spec", "expires")),
                f"{prefix}spec.expires: {expires!r} is not an RFC 3339 time with a zone (2026-12-01T00:00:00Z)",
            )
        )
    return problems


def unknown_rules(exception: PolicyException, rules: Mapping[str, bool]) -> list[str]:
    """What is wrong with the rules an exception names, given the pack's rules (name -> exceptable):
    a rule the pack does not have, or one that refuses exceptions."""
    problems = []
    hints = HINTS  # a did-you-mean compares with every rule: the first few unknown names get one
    for rule in sorted(exception.rules):
        if rule not in rules:
            hint = difflib.get_close_matches(rule, list(rules), n=1) if hints > 0 else []
            hints -= 1
            problems.append(f"spec.rules: no rule named {rule!r}" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
        elif not rules[rule]:
            problems.append(f"spec.rules: rule {rule!r} cannot be excepted (spec.exceptable: false)")
    return problems


def excepting(
    exceptions: Iterable[PolicyException],
    kind: str,
    obj: Mapping[str, Any] | None,
    namespace: str | None,
    now: datetime | None,
) -> dict[str, PolicyException]:
    """rule name -> the exception that lets `obj` (of `kind`, in `namespace`) through it at `now`
    (None: the current UTC time); the first by name when several do. Empty when none applies."""
    if not namespace:
        return {}
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name")
    labels = metadata.get("labels")
    name = name if isinstance(name, str) else ""
    labels = labels if isinstance(labels, Mapping) else None
    at = now or utc_now()
    found: dict[str, PolicyException] = {}
    for exception in exceptions:
        if exception.expired(at) or not exception.covers(kind, name, namespace, labels):
            continue
        for rule in exception.rules:
            current = found.get(rule)
            if current is None or exception.name < current.name:
                found[rule] = exception
    return found


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 date-time with its zone (Z or ±hh:mm) as an aware datetime; None otherwise."""
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        return None
    return found if found.tzinfo is not None and "T" in text.upper() else None


def utc_now() -> datetime:
    return datetime.now(UTC)


def _build(data: Mapping[str, Any], source: SourceLocation) -> PolicyException:
    metadata, spec = data["metadata"], data["spec"]
    match = spec.get("match") or {}
    expires = spec.get("expires")
    return PolicyException(
        name=metadata["name"],
        namespace=metadata["namespace"],
        rules=frozenset(spec["rules"]),
        kinds=frozenset(match.get("kinds") or ()),
        names=frozenset(match.get("names") or ()),
        selector=selector_of(match.get("objectSelector")),
        expires=parse_time(expires) if isinstance(expires, str) else None,
        reason=spec["reason"],
        source=source,
    )


def _name(data: Any) -> str | None:
    metadata = data.get("metadata") if isinstance(data, Mapping) else None
    if not isinstance(metadata, Mapping):
        return None
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if isinstance(name, str) and isinstance(namespace, str):
        return f"{namespace}/{name}"
    return name if isinstance(name, str) else None


def _where(document: Document | Mapping[str, Any], origin: str | None, path: tuple[Any, ...]) -> SourceLocation:
    if isinstance(document, Document):
        line, column = document.position(path)
        return SourceLocation(document.file, line, column)
    return SourceLocation(origin or f"{EXCEPTION_KIND} {_name(document) or '<unnamed>'}", 1, 1)
