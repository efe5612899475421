"""Engine vs exported policies on one admission, rule by rule: same decision, same patched object.

Generic over whatever rules/ and rules/tests/ hold: every case of every GPUPolicyTest suite,
the same cases with their Pod re-wrapped into every workload kind (autogen), and generated
objects, each against every exported rule. The engine runs each rule alone
(`RuleSet.build([rule])`, Phase.ALL: its mutations, then its validation on the result), as
the apiserver runs one rule's MutatingAdmissionPolicy and then its ValidatingAdmissionPolicy.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tests.export.apiserver import Apiserver, NativeOutcome
from tests.export.native_site import not_exceptable
from tests.support import RULES
from webhook.authoring import suite
from webhook.engine import AdmissionInput, Limits, Phase, Result, RuleSet, evaluate, load_rules
from webhook.export import Export
from webhook.export.policies import NativeRule

NAME_LABEL = "kubernetes.io/metadata.name"
# test-only rules with native-friendly mutations: every mutating rule of the pack counts
# accelerators (refused), so these keep the MutatingAdmissionPolicy path under test
EXTRA_RULES = Path(__file__).parent / "rules"


def pack_with_extras(rules: Path = RULES) -> RuleSet:
    """The rule pack plus EXTRA_RULES, under the pack's configuration, none exceptable (as a site that
    exports them makes them: tests/export/native_site.py)."""
    pack = load_rules(rules).require()
    extra = load_rules(EXTRA_RULES).require()
    return not_exceptable(RuleSet.build([*pack.rules, *extra.rules], pack.env))


@dataclass(slots=True)
class Comparison:
    case: str
    rule: str
    engine: tuple[Any, ...]
    native: tuple[Any, ...]

    @property
    def same(self) -> bool:
        return self.engine == self.native

    def __str__(self) -> str:
        return f"{self.case} / {self.rule}:\n  engine: {self.engine}\n  native: {self.native}"


def as_apiserver_sends(admission: AdmissionInput) -> AdmissionInput:
    """What the apiserver hands a policy: objects decoded from JSON (no shared sub-objects, as a
    generator may make), and for a namespaced object its Namespace, labelled with its name."""
    namespace = admission.namespace
    ns = None
    if namespace:
        ns = copy.deepcopy(admission.namespace_object) or {"apiVersion": "v1", "kind": "Namespace", "metadata": {}}
        metadata = ns.setdefault("metadata", {})
        metadata.setdefault("name", namespace)
        metadata.setdefault("labels", {})[NAME_LABEL] = namespace
    # everything else (request, sub_resource, the cluster context of a case's clusterObjects) as
    # the engine gets it: the policies cannot read the context, the rules that need it are refused
    return replace(
        admission, object=_decoded(admission.object), old_object=_decoded(admission.old_object), namespace_object=ns
    )


def _decoded(document: Any) -> Any:
    return None if document is None else json.loads(json.dumps(document, default=str))


def engine_view(ruleset: RuleSet, rule_name: str, admission: AdmissionInput) -> tuple[Any, ...]:
    rule = next(r for r in ruleset.rules if r.name == rule_name)
    # no time budget: on a loaded machine it would turn a slow first call into an error; the
    # apiserver bounds CEL by cost instead (docs/native.md)
    decision = evaluate(RuleSet.build([rule], ruleset.env), admission, Phase.ALL, limits=Limits(time_budget=None))
    outcome = next((o for o in decision.outcomes() if o.rule == rule_name), None)
    result = "pass"
    messages: list[str] = []
    if outcome is not None:
        if outcome.result == Result.ERROR:
            result = "error-deny" if outcome.blocks else "error-ignore"
        elif outcome.result in (Result.FAIL, Result.WARN, Result.AUDIT):
            result = {Result.FAIL: "deny", Result.WARN: "warn", Result.AUDIT: "audit"}[outcome.result]
            messages = list(outcome.messages)
    patched = decision.mutated if decision.mutated is not None and decision.mutated != admission.object else None
    if result.startswith("error"):
        messages, patched = [], patched if result == "error-ignore" else None
    return result, _split(messages), patched


def native_view(outcome: NativeOutcome) -> tuple[Any, ...]:
    patched = None if outcome.result == "error-deny" else outcome.patched
    return outcome.result, _split(outcome.messages), patched


def _split(messages: list[str]) -> list[str]:
    """The messages as a multiset of words. CEL leaves the order of a map's keys unspecified (Go
    randomises it), so the items a message lists from a map (resource names, replica roles) may
    come in another order; any other difference in the text still shows."""
    return sorted(word.strip(",;") for message in messages for word in message.split())


def compare(
    ruleset: RuleSet, exported: Export, server: Apiserver, name: str, admission: AdmissionInput
) -> Iterator[Comparison]:
    admission = as_apiserver_sends(admission)
    for native in exported.rules:
        if not covers(native, admission):
            continue
        engine = engine_view(ruleset, native.rule, admission)
        outcome = server.admit(native, admission)
        yield Comparison(name, native.rule, engine, native_view(outcome))


def covers(native: NativeRule, admission: AdmissionInput) -> bool:
    """Whether the export claims the rule's decision here: a rule exported for CREATE only (its
    note says so; the webhook keeps it) is not compared on UPDATE, and nothing else is skipped."""
    return native.note is None or admission.operation != "UPDATE"


def idempotent(native: NativeRule, server: Apiserver, admission: AdmissionInput) -> bool:
    """A second application of the mutating policy (reinvocation) changes nothing."""
    if native.mutating is None or admission.object is None:
        return True
    admission = as_apiserver_sends(admission)
    if not server.matches(native.mutating, admission):
        return True
    try:
        once, _ = server.mutate(native.mutating, admission, admission.object)
    except Exception:  # the first application's error is compared with the engine's by compare()
        return True
    try:
        twice, _ = server.mutate(native.mutating, admission, once)
    except Exception:  # a reinvocation that fails fails the user's request: not idempotent
        return False
    return once == twice


# -- the cases -------------------------------------------------------------------------------------


def suite_cases(rules: Path = RULES) -> Iterator[tuple[str, AdmissionInput]]:
    for found in suite.discover(str(rules / "tests"), rules=str(rules)):
        base = Path(found.file).parent
        for case in found.cases:
            name = f"{Path(found.file).name}::{case['name']}"
            yield name, suite.admission(case, base)


def _template(pod: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": copy.deepcopy(pod.get("spec") or {})}
    labels = (pod.get("metadata") or {}).get("labels")
    if labels:
        template["metadata"] = {"labels": dict(labels)}
    return template


def wrap(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    """The Pod's spec as the pod template(s) of a workload kind, as its controller would make the Pods."""
    metadata = {k: v for k, v in (pod.get("metadata") or {}).items() if k in ("name", "namespace", "labels")}
    t = _template(pod)
    spec: dict[str, Any]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        api, spec = "apps/v1", {"template": t}
    elif kind == "Job":
        api, spec = "batch/v1", {"template": t}
    elif kind == "CronJob":
        api, spec = "batch/v1", {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": t}}}
    elif kind == "JobSet":
        jobs = [{"name": n, "template": {"spec": {"template": copy.deepcopy(t)}}} for n in ("driver", "workers")]
        api, spec = "jobset.x-k8s.io/v1alpha2", {"replicatedJobs": jobs}
    elif kind == "PyTorchJob":
        roles = {r: {"replicas": 1, "template": copy.deepcopy(t)} for r in ("Master", "Worker")}
        api, spec = "kubeflow.org/v1", {"pytorchReplicaSpecs": roles}
    elif kind == "RayJob":
        cluster = {
            "headGroupSpec": {"template": copy.deepcopy(t)},
            "workerGroupSpecs": [{"groupName": "gpu", "template": t}],
        }
        api, spec = "ray.io/v1", {"rayClusterSpec": cluster}
    elif kind == "LeaderWorkerSet":
        api = "leaderworkerset.x-k8s.io/v1"
        spec = {"leaderWorkerTemplate": {"leaderTemplate": copy.deepcopy(t), "workerTemplate": t}}
    else:
        raise ValueError(kind)
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec}


WRAPPED_KINDS = ("Deployment", "CronJob", "Job", "JobSet", "PyTorchJob", "RayJob", "LeaderWorkerSet")


def wrapped_cases(cases: list[tuple[str, AdmissionInput]]) -> Iterator[tuple[str, AdmissionInput]]:
    for name, admission in cases:
        pod = admission.object
        if not isinstance(pod, dict) or pod.get("kind") != "Pod" or pod.get("apiVersion") != "v1":
            continue
        old = admission.old_object if isinstance(admission.old_object, dict) else None
        for kind in WRAPPED_KINDS:
            obj = wrap(pod, kind)
            wrapped = AdmissionInput.offline(
                obj,
                operation=admission.operation,
                old_object=wrap(old, kind) if old is not None and old.get("kind") == "Pod" else None,
                namespace=admission.namespace,
                namespace_object=admission.namespace_object,
                user_info=admission.request.get("userInfo"),
            )
            yield f"{name} [as {kind}]", _with_context(wrapped, admission)


def _with_context(admission: AdmissionInput, source: AdmissionInput) -> AdmissionInput:
    """The cluster context (clusterObjects) of the case a generated input came from."""
    return replace(
        admission,
        priority_classes=source.priority_classes,
        resource_claims=source.resource_claims,
        resource_claim_templates=source.resource_claim_templates,
    )


def debug_cases(cases: list[tuple[str, AdmissionInput]]) -> Iterator[tuple[str, AdmissionInput]]:
    """`kubectl debug` on each Pod of the cases: an UPDATE of pods/ephemeralcontainers whose
    object is the Pod with one more ephemeral container, a copy of its first container (the
    engine evaluates these, evaluate.py EVALUATED_SUBRESOURCES; so do the exported policies)."""
    for name, admission in cases:
        pod = admission.object
        if not isinstance(pod, dict) or pod.get("kind") != "Pod" or admission.operation != "CREATE":
            continue
        containers = (pod.get("spec") or {}).get("containers")
        if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
            continue
        debugger = {k: v for k, v in copy.deepcopy(containers[0]).items() if k not in ("resources", "ports")}
        debugger["name"] = "debugger"
        new = copy.deepcopy(pod)
        new["spec"].setdefault("ephemeralContainers", []).append(debugger)
        debug = AdmissionInput.offline(
            new,
            operation="UPDATE",
            old_object=pod,
            namespace=admission.namespace,
            namespace_object=admission.namespace_object,
            user_info=admission.request.get("userInfo"),
            sub_resource="ephemeralcontainers",
        )
        yield f"{name} [kubectl debug]", _with_context(debug, admission)
