"""The stand-in apiserver of tests/export (apiserver.py: a hand-written model of ValidatingAdmissionPolicy and
MutatingAdmissionPolicy) checked against a real kube-apiserver on a sample of its own corpus.

tests/export/test_equivalence.py compares the engine with that model on thousands of cases; the model is
only as good as its likeness to the apiserver (its docstring names the dyn-vs-typed gap). Here every run
takes a sample of the equivalence corpus (the pack's suite cases and their Pods wrapped into workload
kinds: CREATEs of built-in kinds), installs the exported policies of the pack and tests/export/rules (one
policy and binding per rule) on an apiserver of its own, and checks, case by case, that the model's verdict
is the apiserver's: allowed or denied, the denying rule and its message words, the Warn rules' warnings,
and the stored object (the model's mutations sent as a dry run before the policies exist, against the
dry run with them). The sample is `SAMPLE` cases drawn with `GPU_WEBHOOK_SAMPLE_SEED` (default 40; the
seed is printed, so a failure can be run again).
"""

from __future__ import annotations

import copy
import json
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonpatch
import pytest

from tests.e2e.conftest import CLUSTER_FLAGS
from tests.e2e.test_export_native import ADMIN_INFO, WARNING, _walk, attributed, normalized, valid, words
from tests.export.apiserver import Apiserver, NativeOutcome
from tests.export.equivalence import (
    NAME_LABEL,
    as_apiserver_sends,
    covers,
    pack_with_extras,
    suite_cases,
    wrapped_cases,
)
from tests.support.envtest import SKIP_REASON, EnvTest, Response, assets_dir
from webhook.engine import AdmissionInput
from webhook.export import export
from webhook.export.policies import NativeRule

SAMPLE = 40
SEED = int(os.environ.get("GPU_WEBHOOK_SAMPLE_SEED", "40"))
BUILT_IN = {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}
DENIAL = "denied request: "


@dataclass
class Sent:
    name: str
    obj: dict[str, Any]  # as sent (valid(), in its namespace)
    admission: AdmissionInput  # as the policies get it: the stored Namespace, the user the requests are made as
    model: dict[str, NativeOutcome]  # rule -> the model's outcome
    unchanged: Response  # the object as sent, dry-run before any policy (what the apiserver refuses by itself)
    expected: Response | None = None  # the model's result, dry-run before any policy


def sample() -> list[tuple[str, AdmissionInput]]:
    found = list(suite_cases())
    corpus = [
        (name, admission)
        for name, admission in found + list(wrapped_cases(found))
        if admission.operation == "CREATE"
        and isinstance(admission.object, dict)
        and admission.object.get("kind") in BUILT_IN
        and not admission.sub_resource
    ]
    return random.Random(SEED).sample(corpus, min(SAMPLE, len(corpus)))


def model_object(obj: dict[str, Any], outcomes: dict[str, NativeOutcome]) -> dict[str, Any]:
    """The object after every rule's mutating policy, each rule's changes applied in turn."""
    result = copy.deepcopy(obj)
    for outcome in outcomes.values():
        if outcome.patched is not None:
            result = jsonpatch.apply_patch(result, jsonpatch.make_patch(obj, outcome.patched))
    return result


def model_denies(outcomes: dict[str, NativeOutcome]) -> dict[str, tuple[str, ...]]:
    return {rule: words(o.messages) for rule, o in outcomes.items() if o.result in ("deny", "error-deny")}


def model_warns(outcomes: dict[str, NativeOutcome]) -> dict[str, tuple[str, ...]]:
    return {rule: words(o.messages) for rule, o in outcomes.items() if o.result == "warn"}


def unordered(obj: Any) -> Any:
    """normalized(), with every tolerations list sorted. The built-in DefaultTolerationSeconds plugin runs
    before the policies (kubernetes/kubernetes pkg/kubeapiserver/options/plugins.go AllOrderedPlugins), so
    with the policies its tolerations come before a policy's, and in the dry run of the model's result
    after it; their order means nothing to the scheduler."""
    obj = normalized(obj)
    for tolerations in _walk(obj, "tolerations"):
        if isinstance(tolerations, list):
            tolerations.sort(key=lambda t: json.dumps(t, sort_keys=True))
    return obj


def without_copied_template_labels(stored: Any, sent: dict[str, Any]) -> Any:
    """A stored Job sent without labels, without the labels it may hold as copies of its template's.
    SetDefaults_Job copies the template's labels to a Job that has none (kubernetes/kubernetes
    pkg/apis/batch/v1/defaults.go). The MutatingAdmissionPolicy dispatcher defaults the object after
    every mutation (k8s.io/apiserver admission/plugin/policy/mutating/dispatcher.go dispatchOne), and
    takes the policies in the order of a Go map (generic/policy_source.go calculatePolicyData). So
    whether such a Job gets copies, and of which template labels, depends on whether a policy that
    labels the Job itself ran first: an order the apiserver leaves open and the model cannot know."""
    if sent.get("kind") != "Job" or (sent.get("metadata") or {}).get("labels"):
        return stored
    labels = stored.get("metadata", {}).get("labels")
    template = ((stored.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    if isinstance(labels, dict):
        kept = {k: v for k, v in labels.items() if template.get(k) != v}
        stored = {**stored, "metadata": {**stored["metadata"], "labels": kept}}
    return stored


def refusal(answer: Response) -> str:
    return f"{answer.status} {answer.message}"


def differences(sent: Sent, answer: Response) -> list[str]:
    denies = model_denies(sent.model)
    if denies:
        if not sent.unchanged.ok and refusal(sent.unchanged) == refusal(answer):
            return []  # validation runs before the validating policies: refused by the apiserver itself
        if answer.ok:
            return [f"model: denied by {sorted(denies)}; apiserver: admitted"]
        policy, _, message = answer.message.partition(DENIAL)
        rule = next((r for r in denies if f"'gpu-webhook-{r}'" in policy), None)
        if rule is None:
            return [f"model: denied by {sorted(denies)}; apiserver: {answer.status} {answer.message[:300]}"]
        if sent.model[rule].result == "deny" and words([attributed(rule, message, {})[1]]) != denies[rule]:
            return [f"{rule}: model says {denies[rule]}; apiserver says {message[:300]}"]
        return []
    assert sent.expected is not None
    if not answer.ok:
        if not sent.expected.ok and refusal(sent.expected) == refusal(answer):
            return []  # the model's result is refused by the apiserver itself, with the policies as without
        return [f"model: admitted; apiserver: {answer.status} {answer.message[:300]}"]
    warned = {}
    for text in answer.warnings:
        warning = WARNING.match(text)
        if warning:
            rule, message = attributed(warning["policy"], warning["message"], {})
            warned[rule] = words([message])
    found = (
        [] if warned == model_warns(sent.model) else [f"warnings: model {model_warns(sent.model)}; apiserver {warned}"]
    )
    if not sent.expected.ok:
        return [
            *found,
            f"the apiserver admits with the policies what it refuses as the model's result: {sent.expected.message}",
        ]
    model, stored = (unordered(without_copied_template_labels(b, sent.obj)) for b in (sent.expected.body, answer.body))
    changes = jsonpatch.make_patch(model, stored)
    return [*found, *(f"stored object, model -> apiserver: {change}" for change in changes)]


def priority_classes(api: EnvTest, objects: list[Any], made: set[str]) -> set[str]:
    """Create the PriorityClasses `objects` name that are not made yet (the Priority admission plugin
    refuses a pod naming a missing one); the names made."""
    names = {n for o in objects for n in _walk(o, "priorityClassName") if isinstance(n, str) and n}
    for name in sorted(names - made):
        if not name.startswith("system-"):
            body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
            created = api.create({**body, "value": 1000})
            assert created.ok or created.status == 409, created.message
    return names


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[EnvTest, list[Sent], list[NativeRule]]]:
    if assets_dir() is None:
        pytest.skip(SKIP_REASON)
    rules = [r for r in export(pack_with_extras()).rules if r.validating is not None or r.mutating is not None]
    model = Apiserver()
    with EnvTest.start(apiserver_args=CLUSTER_FLAGS) as api:
        cases = sample()
        objects = [a.object for _, a in cases]
        for name in sorted({n for o in objects for n in _walk(o, "runtimeClassName") if isinstance(n, str)}):
            api.create(
                {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": name}
            )
        classes: set[str] = set()  # the PriorityClasses made: the objects' and those the mutations set
        assigned: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}  # (name, definition) -> stored
        sent = []
        for name, admission in cases:
            original = admission.namespace or "default"
            metadata = (admission.namespace_object or {}).get("metadata") or {}
            annotations = dict(metadata.get("annotations") or {})
            definition = repr(sorted((metadata.get("labels") or {}).items())) + repr(sorted(annotations.items()))
            if (original, definition) not in assigned:  # a name the sample defines twice: a second name
                taken = sum(1 for n, _ in assigned if n == original)
                namespace = original if taken == 0 else f"{original}-v{taken + 1}"
                labels = {**(metadata.get("labels") or {}), NAME_LABEL: namespace}
                if namespace == "default":
                    stored = api.request("GET", "/api/v1/namespaces/default").body
                    stored["metadata"].update(labels=labels, annotations=annotations)
                    stored = api.request("PUT", "/api/v1/namespaces/default", stored).body
                else:
                    stored = api.create_namespace(namespace, labels, annotations)
                assigned[original, definition] = (namespace, stored)
            namespace, stored = assigned[original, definition]
            obj = valid(admission.object or {})
            obj.setdefault("metadata", {})["namespace"] = namespace
            seen = AdmissionInput.offline(
                obj, namespace=namespace, namespace_object=stored, user_info=ADMIN_INFO, dry_run=True
            )
            seen = as_apiserver_sends(seen)
            outcomes = {native.rule: model.admit(native, seen) for native in rules if covers(native, seen)}
            patched = [o.patched for o in outcomes.values() if o.patched is not None]
            classes |= priority_classes(api, [obj, *patched], classes)
            case = Sent(name, obj, seen, outcomes, api.dry_run_create(obj))
            if not model_denies(outcomes):
                case.expected = api.dry_run_create(model_object(obj, outcomes))
            sent.append(case)
        for native in rules:
            for document in native.objects:
                created = api.create(document)
                assert created.ok, f"{document['kind']}/{document['metadata']['name']}: {created.message}"
        yield api, sent, rules


def test_the_model_decides_as_the_real_apiserver(cluster: tuple[EnvTest, list[Sent], list[NativeRule]]) -> None:
    api, sent, rules = cluster
    began = time.monotonic()

    def compare(batch: list[Sent]) -> dict[str, list[str]]:
        found = {}
        for case in batch:
            differs = differences(case, api.dry_run_create(case.obj))
            if differs:
                found[case.name] = differs
        return found

    mismatches = compare(sent)
    deadline = time.monotonic() + 15  # the apiserver loads policies through an informer
    while mismatches and time.monotonic() < deadline:
        time.sleep(1)
        mismatches = compare([c for c in sent if c.name in mismatches])
    denied = sum(1 for c in sent if model_denies(c.model))
    patched = sum(1 for c in sent if any(o.patched is not None for o in c.model.values()))
    print(
        f"\nmodel vs kube-apiserver: {len(sent)} sampled CREATEs (seed {SEED}) on {len(rules)} exported rules: "
        f"{denied} denied, {patched} patched, {len(sent) - denied} admitted; {time.monotonic() - began:.1f} s"
    )
    report = [f"{name}:\n  " + "\n  ".join(found[:5]) for name, found in list(mismatches.items())[:10]]
    assert not mismatches, f"{len(mismatches)} of {len(sent)} sampled cases decided otherwise:\n" + "\n".join(report)
    assert len(sent) == min(SAMPLE, len(sample()))
    assert denied and patched and len(sent) - denied, "the sample must hold denials, patches and admissions"
