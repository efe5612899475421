"""One load of the rule files and the cluster's policy objects in which a broken object is the only one left out.

The loader builds a RuleSet only when nothing has errors. Its errors are located per document (an
object's document is named by `PolicyObject.label`), so the objects to blame are known: they are
left out, and the load runs again with everything else, until it succeeds or what is left is a
problem of the rule files. Each round after the first drops at least one object (the errors of every
object broken on its own come in one round), so the rounds are bounded by the objects. Blame is
deterministic, so that every replica agrees:

- an error located at an object (its schema, its CEL, an overlay's unknown rule or param) is that object's;
- GPUPolicies are judged as written, overlay objects by what they do to the rules that load: an error
  in a rule that an overlay changed (the loader adds ``(with GPUPolicyOverlay ...)``) is the overlay's,
  the newest of those that change the rule first;
- a rule name both in a file and in a GPUPolicy is the object's (files load first: a file rule is
  never the one dropped); two overlays that set the same field: the newer one (the load order is
  creationTimestamp, then name, and the loader reports the later document);
- a GPUPolicy left out keeps its name known, so an overlay or exception that also names it is not
  broken by that alone (an overlay that raises a ceiling on another rule keeps doing so);
- an error no object is named for, when the rules loaded without the overlay objects, is an overlay's
  still (one that sets `exceptable: false` on a rule a file's exception names): each overlay is
  tried alone on the rules, newest first, and those that fail alone are left out;
- any other error is a rule file's: the load fails, and the caller keeps its last good rule set;
- an object left out whose previous version loaded (its new generation broke it) runs that previous
  version, if it still loads beside the rest: the last good state is kept, and reported.

Anchors: Kyverno sets each policy's readiness on its own, from whether the webhook configuration it
builds from the policies covers that policy (kyverno/kyverno pkg/controllers/webhook/controller.go,
recordPolicyState / updatePolicyStatuses); Gatekeeper reports a ConstraintTemplate's errors in that
template's own per-pod status (open-policy-agent/gatekeeper
apis/status/v1beta1/constrainttemplatepodstatus_types.go, `errors`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.engine import LoadError, LoadResult, SourceLocation
from webhook.engine.documents import OVERLAY_KIND, POLICY_KIND
from webhook.kube.policyobjects import PolicyObject

from .files import RuleFiles

Key = tuple[str, str, str]  # (kind, namespace, name)
OVERLAID_MARK = f" (with {OVERLAY_KIND} "  # the loader's note on an error in an overlaid rule
_KIND_ORDER = {POLICY_KIND: 0, OVERLAY_KIND: 1}


@dataclass
class IsolatedLoad:
    """What one isolated load gives: the loader's last result, the objects in it, and those left out (and why)."""

    result: LoadResult
    loaded: list[PolicyObject] = field(default_factory=list)
    rejected: dict[Key, list[LoadError]] = field(default_factory=dict)
    rounds: int = 0
    kept: list[PolicyObject] = field(default_factory=list)  # previous versions in use of rejected objects


def load_order(obj: Mapping[str, Any]) -> tuple[int, str, str, str]:
    """GPUPolicies, then overlays; each oldest first (creationTimestamp, then namespace and name)."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    return (
        _KIND_ORDER.get(str(obj.get("kind")), 2),
        str(metadata.get("creationTimestamp") or ""),
        str(metadata.get("namespace") or ""),
        str(metadata.get("name") or ""),
    )


def isolated_load(
    paths: list[str] | RuleFiles, objects: Iterable[PolicyObject], previous: Mapping[Key, PolicyObject] | None = None
) -> IsolatedLoad:
    """Load `paths` and `objects` (in load order), leaving out each object that does not load.

    `paths` may be a RuleFiles that the caller keeps: the files are then parsed only when they change
    (files.py); given as paths, they are parsed once for this load's loader runs.

    `previous`: the version of each object the last load ran. An object whose new version is left out
    runs its previous one instead, when that still loads beside everything else that does (the last good
    state is kept, as for a rule file); it stays reported with the new version's errors. After a restart
    there is no previous version, and the object is left out."""
    files = paths if isinstance(paths, RuleFiles) else RuleFiles(paths)
    objects = list(objects)
    outcome = _isolated(files, objects)
    if outcome.result.ruleset is None or not previous:
        return outcome
    current = {o.key: o for o in objects}
    kept = {
        key: previous[key]
        for key in outcome.rejected
        if key in previous and previous[key].uid == current[key].uid and previous[key].document != current[key].document
    }
    if not kept:
        return outcome
    retry = _isolated(files, [kept.get(o.key, o) for o in objects if o.key not in outcome.rejected or o.key in kept])
    if retry.result.ruleset is None or any(key not in kept for key in retry.rejected):
        return outcome  # a previous version must never displace what loads now
    retry.rejected = outcome.rejected
    retry.kept = [o for o in retry.loaded if o.key in kept]
    retry.rounds += outcome.rounds
    return retry


def _isolated(files: RuleFiles, objects: Iterable[PolicyObject]) -> IsolatedLoad:
    """Load `paths` and `objects`, leaving out each object that does not load (the module's rules).

    Everything at once first (the usual case: one load), then without the objects its errors name
    (`_at_once`: two loads for any number of objects broken on their own). Where that does not settle
    it, the GPUPolicies are judged as written (with the files, without the overlay objects), then the
    overlay objects on the GPUPolicies that loaded: a GPUPolicy that does not compile is its own fault
    even where an overlay changes it, and an overlay is judged by what it does to rules that load."""
    objects = list(objects)
    first = files.load([o.document for o in objects])
    outcome = IsolatedLoad(first, objects, {}, 1)
    if first.ruleset is not None:
        return outcome
    direct = _at_once(files, objects, outcome)
    if direct is not None:
        return direct
    outcome = IsolatedLoad(first, objects, {}, outcome.rounds)
    policies = [o for o in objects if o.kind != OVERLAY_KIND]
    overlays = [o for o in objects if o.kind == OVERLAY_KIND]
    # without overlay objects, the first load is the GPUPolicies' first round
    outcome = _settle(files, [], policies, outcome, None if overlays else first)
    if outcome.result.ruleset is None or not overlays:
        return outcome
    rules = outcome.loaded
    outcome = _settle(files, rules, overlays, outcome)
    if outcome.result.ruleset is not None:
        return outcome
    # the rules loaded without the overlay objects, so an error no overlay is named for is still theirs
    # (an overlay that sets exceptable: false under a file's GPUPolicyException): each alone, newest first
    remaining = [o for o in outcome.loaded if o.kind == OVERLAY_KIND]
    for overlay in reversed(remaining):
        alone = files.load([o.document for o in (*rules, overlay)], absent=_absent(outcome.rejected))
        outcome.rounds += 1
        if alone.ruleset is None:
            where = SourceLocation(overlay.label, 1, 1)
            outcome.rejected[overlay.key] = [LoadError(where, f"with this overlay: {e}") for e in alone.errors]
    return _settle(files, rules, [o for o in remaining if o.key not in outcome.rejected], outcome)


def _at_once(files: RuleFiles, objects: list[PolicyObject], outcome: IsolatedLoad) -> IsolatedLoad | None:
    """The usual failure in fewer loads: while every error names its object and none is in an overlaid
    rule (whose blame needs the GPUPolicies judged alone first), drop the objects named and load the
    rest again. None when that does not settle it; `outcome.rounds` counts the loads made either way."""
    rejected: dict[Key, list[LoadError]] = {}
    remaining, result = objects, outcome.result
    while result.ruleset is None:
        if any(OVERLAID_MARK in error.message for error in result.errors):
            return None
        blamed = blame(result.errors, remaining)
        if not blamed or any(not _about_objects(error, remaining) for error in result.errors):
            return None
        rejected.update(blamed)
        remaining = [o for o in remaining if o.key not in blamed]
        result = files.load([o.document for o in remaining], absent=_absent(rejected))
        outcome.rounds += 1
    return IsolatedLoad(result, remaining, rejected, outcome.rounds)


def _absent(rejected: Mapping[Key, object]) -> list[str]:
    """The names of the GPUPolicies left out: rules that exist, for the overlays and exceptions naming them."""
    return sorted(key[2] for key in rejected if key[0] == POLICY_KIND)


def _settle(
    files: RuleFiles,
    fixed: list[PolicyObject],
    candidates: list[PolicyObject],
    outcome: IsolatedLoad,
    first: LoadResult | None = None,
) -> IsolatedLoad:
    """Load `fixed` and `candidates`, dropping the candidates the errors blame, until the load succeeds or
    an error blames none of them (a rule file's problem: the failed result, the blamed so far kept).
    `first`: the result of loading exactly these, when the caller has it."""
    rejected = outcome.rejected
    rounds = outcome.rounds
    while True:
        if first is not None:
            result, first = first, None
        else:
            rounds += 1
            result = files.load([o.document for o in (*fixed, *candidates)], absent=_absent(rejected))
        if result.ruleset is not None:
            return IsolatedLoad(result, [*fixed, *candidates], rejected, rounds)
        blamed = blame(result.errors, candidates)
        for key, errors in blamed.items():
            rejected.setdefault(key, errors)
        if not blamed or any(not _about_objects(error, candidates) for error in result.errors):
            return IsolatedLoad(result, [*fixed, *candidates], rejected, rounds)
        candidates = [o for o in candidates if o.key not in blamed]


def blame(errors: Iterable[LoadError], objects: list[PolicyObject]) -> dict[Key, list[LoadError]]:
    """The objects these errors are about, each with its errors (located at the object)."""
    by_label = {o.label: o for o in objects}
    overlays = [o for o in objects if o.kind == OVERLAY_KIND]
    found: dict[Key, list[LoadError]] = {}
    for error in errors:
        culprit = _overlay_of(error, overlays)
        if culprit is not None:
            where = SourceLocation(culprit.label, 1, 1)
            found.setdefault(culprit.key, []).append(LoadError(where, error.message, error.rule))
            continue
        obj = by_label.get(error.location.file)
        if obj is not None:
            found.setdefault(obj.key, []).append(error)
    return found


def _overlay_of(error: LoadError, overlays: list[PolicyObject]) -> PolicyObject | None:
    """The overlay object to blame for an error in a rule it changed: the newest that names the rule."""
    if error.rule is None or OVERLAID_MARK not in error.message:
        return None
    naming = [o for o in overlays if error.rule in _overlay_rules(o)]
    return naming[-1] if naming else None


def _overlay_rules(overlay: PolicyObject) -> set[str]:
    spec = overlay.document.data.get("spec") if isinstance(overlay.document.data, Mapping) else None
    entries = spec.get("rules") if isinstance(spec, Mapping) else None
    if not isinstance(entries, list):
        return set()
    return {str(e.get("name")) for e in entries if isinstance(e, Mapping)}


def _about_objects(error: LoadError, objects: list[PolicyObject]) -> bool:
    labels = {o.label for o in objects}
    overlays = [o for o in objects if o.kind == OVERLAY_KIND]
    return error.location.file in labels or _overlay_of(error, overlays) is not None
