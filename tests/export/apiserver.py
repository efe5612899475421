"""What a kube-apiserver does with the exported policies, for one admission, without a cluster.

Written from the apiserver's behaviour as documented and as its sources show it
(k8s.io/apiserver/pkg/admission/plugin/policy/{validating,mutating}):
- a policy applies when a resourceRule names the request's group, resource (with its
  subresource: pods/ephemeralcontainers) and operation,
  the namespaceSelector matches the namespace's labels (every namespace carries
  kubernetes.io/metadata.name), and the objectSelector matches the object or the old object;
- MutatingAdmissionPolicy: mutations run in order, each on the object the previous one left;
  a mutation's JSONPatch is applied with RFC 6902 semantics; an error is the policy's
  failurePolicy (Fail: the request is rejected; Ignore: the mutation is skipped);
- ValidatingAdmissionPolicy: variables are computed in order and read as `variables.NAME`;
  a validation that is false fails with its messageExpression (or message); an error is the
  failurePolicy; the binding's validationActions decide Deny / Warn / Audit.
The CEL runs on celenv.NativeEnvironment: the engine's runtime with the apiserver's libraries.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from webhook.engine import AdmissionInput
from webhook.engine.model import LabelSelector
from webhook.engine.workloads import api_group
from webhook.export.celenv import EvaluationFailed, NativeEnvironment
from webhook.export.policies import NativeRule
from webhook.export.targets import api_of


@dataclass(slots=True)
class NativeOutcome:
    result: str  # pass | deny | warn | audit | error-deny | error-ignore
    messages: list[str] = field(default_factory=list)
    patched: dict[str, Any] | None = None  # the object after the mutating policy (None: unchanged)
    errors: list[str] = field(default_factory=list)


class Apiserver:
    def __init__(self) -> None:
        self.env = NativeEnvironment()
        self._programs: dict[str, Any] = {}

    def _run(self, expression: str, bindings: dict[str, Any]) -> Any:
        program = self._programs.get(expression)
        if program is None:
            program = self._programs[expression] = self.env.compile(expression)
        return self.env.evaluate(program, bindings)

    # -- matching --------------------------------------------------------------------------------
    def matches(self, policy: dict[str, Any], admission: AdmissionInput) -> bool:
        subject = admission.subject or {}
        constraints = policy["spec"]["matchConstraints"]
        try:
            _, plural = api_of(str(subject.get("kind")))
        except ValueError:
            return False
        group = api_group(subject)
        # a resourceRule names a subresource as resource/subresource (pods/ephemeralcontainers)
        resource = f"{plural}/{admission.sub_resource}" if admission.sub_resource else plural
        if not any(
            group in rule["apiGroups"] and resource in rule["resources"] and admission.operation in rule["operations"]
            for rule in constraints["resourceRules"]
        ):
            return False
        if admission.namespace and "namespaceSelector" in constraints:
            labels = ((admission.namespace_object or {}).get("metadata") or {}).get("labels") or {}
            if not _selects(constraints["namespaceSelector"], labels):
                return False
        if "objectSelector" in constraints:
            documents = [d for d in (admission.object, admission.old_object) if d is not None]
            if not any(
                _selects(constraints["objectSelector"], (d.get("metadata") or {}).get("labels")) for d in documents
            ):
                return False
        return True

    # -- policies --------------------------------------------------------------------------------
    def bindings(self, admission: AdmissionInput, obj: Any) -> dict[str, Any]:
        return {
            "object": obj,
            "oldObject": admission.old_object,
            "request": admission.request,
            "namespaceObject": admission.namespace_object,
            "params": None,
        }

    def _variables(self, policy: dict[str, Any], bindings: dict[str, Any]) -> None:
        computed: dict[str, Any] = {}
        bindings["variables"] = computed
        for variable in policy["spec"].get("variables") or []:
            computed[variable["name"]] = self._run(variable["expression"], bindings)

    def mutate(self, policy: dict[str, Any], admission: AdmissionInput, obj: dict[str, Any]) -> tuple[dict, list[str]]:
        """The object after the policy's mutations, and the errors that failurePolicy Ignore skipped."""
        current = copy.deepcopy(obj)
        skipped: list[str] = []
        for mutation in policy["spec"]["mutations"]:
            bindings = self.bindings(admission, current)
            try:
                self._variables(policy, bindings)
                operations = self._run(mutation["jsonPatch"]["expression"], bindings)
                current = jsonpatch.apply_patch(current, operations)
            except (EvaluationFailed, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
                if policy["spec"]["failurePolicy"] == "Fail":
                    raise
                skipped.append(str(error))
        return current, skipped

    def validate(self, policy: dict[str, Any], admission: AdmissionInput, obj: Any) -> list[str] | None:
        """None when every validation passes, else the failure messages; raises on an evaluation error."""
        bindings = self.bindings(admission, obj)
        self._variables(policy, bindings)
        failures = []
        for validation in policy["spec"]["validations"]:
            if self._run(validation["expression"], bindings) is True:
                continue
            message = validation.get("message") or "failed expression"
            if "messageExpression" in validation:
                with contextlib.suppress(EvaluationFailed):  # the apiserver falls back to message
                    message = self._run(validation["messageExpression"], bindings) or message
            failures.append(message)
        return failures or None

    def admit(self, native: NativeRule, admission: AdmissionInput) -> NativeOutcome:
        """What the apiserver makes of one rule's policies (mutating first, then validating)."""
        outcome = NativeOutcome(result="pass")
        obj = admission.object
        if native.mutating is not None and obj is not None and self.matches(native.mutating, admission):
            try:
                patched, skipped = self.mutate(native.mutating, admission, obj)
            except (EvaluationFailed, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
                return NativeOutcome(result="error-deny", errors=[str(error)])
            outcome.errors += skipped
            if skipped:
                outcome.result = "error-ignore"
            if patched != obj:
                outcome.patched = patched
                obj = patched
        if native.validating is not None and self.matches(native.validating, admission):
            try:
                failures = self.validate(native.validating, admission, obj)
            except EvaluationFailed as error:
                fail = native.validating["spec"]["failurePolicy"] == "Fail"
                return NativeOutcome(
                    result="error-deny" if fail else "error-ignore", patched=outcome.patched, errors=[str(error)]
                )
            if failures:
                outcome.result = {"Deny": "deny", "Warn": "warn", "Audit": "audit"}[native.action]
                outcome.messages = failures
        return outcome


def _selects(selector: dict[str, Any], labels: dict[str, Any] | None) -> bool:
    """A metav1.LabelSelector, evaluated by the engine's model of it (tested against Kubernetes' semantics)."""
    expressions = tuple(
        (e["key"], e["operator"], frozenset(e.get("values") or ())) for e in selector.get("matchExpressions") or []
    )
    model = LabelSelector(tuple((selector.get("matchLabels") or {}).items()), expressions)
    return model.matches(labels)
