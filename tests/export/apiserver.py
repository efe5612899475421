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
Each expression is also type-checked as the apiserver does when the policy is created
(celenv.check_type): a JSONPatch expression must be list(JSONPatch), a validation bool, a
messageExpression string; a policy that fails is one the apiserver would not have stored, and
running it raises PolicyRefused. (namespaceObject and request are dyn here, typed objects there:
a typed string compared with null passes here; the e2e test on a real apiserver closes that.)
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from webhook.engine import AdmissionInput, LabelSelector
from webhook.engine.workloads import api_group
from webhook.export.celenv import BOOL, LIST_OF_JSONPATCH, STRING, CompileError, EvaluationFailed, NativeEnvironment
from webhook.export.policies import NativeRule
from webhook.export.targets import api_of


@dataclass(slots=True)
class NativeOutcome:
    result: str  # pass | deny | warn | audit | error-deny | error-ignore
    messages: list[str] = field(default_factory=list)
    patched: dict[str, Any] | None = None  # the object after the mutating policy (None: unchanged)
    errors: list[str] = field(default_factory=list)


class PolicyRefused(AssertionError):
    """The apiserver would refuse to create the policy (an expression of the wrong type)."""


class Apiserver:
    def __init__(self) -> None:
        self.env = NativeEnvironment()
        self._programs: dict[tuple[str, bool], Any] = {}
        self._checked: set[tuple[str, str, bool]] = set()

    def _run(self, expression: str, bindings: dict[str, Any], result: str | None = None, mutating: bool = False) -> Any:
        """The expression's value; `result`: the type the apiserver requires of it at create time.
        `mutating`: a MutatingAdmissionPolicy's mutation, the one place with the JSONPatch library
        (JSONPatch values, jsonpatch.escapeKey); variables and validations have none."""
        if result is not None and (expression, result, mutating) not in self._checked:
            try:
                self.env.check_type(expression, result, mutating=mutating)
            except CompileError as error:
                raise PolicyRefused(f"{error}: {expression[:200]}") from None
            self._checked.add((expression, result, mutating))
        program = self._programs.get((expression, mutating))
        if program is None:
            try:
                program = self._programs[expression, mutating] = self.env.compile(expression, mutating)
            except CompileError as error:
                raise PolicyRefused(f"{error}: {expression[:200]}") from None
        return self.env.evaluate(program, bindings)

    # -- matching --------------------------------------------------------------------------------
    def matches(self, policy: dict[str, Any], admission: AdmissionInput) -> bool:
        subject = admission.subject or {}
        constraints = policy["spec"]["matchConstraints"]
        group = api_group(subject)
        try:
            _, plural = api_of(str(subject.get("kind")))
        except ValueError:  # a kind outside the table: the one resource its rule declared for the group
            declared = {
                r for rule in constraints["resourceRules"] if group in rule["apiGroups"] for r in rule["resources"]
            }
            if len(declared) != 1:
                return False
            (plural,) = declared
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
        # each mutation sees the object as the previous ones left it, its variables too (they are
        # evaluated per mutation: verified on kube-apiserver v1.36.2); an error under Ignore skips
        # that mutation and the others run (verified)
        for mutation in policy["spec"]["mutations"]:
            bindings = self.bindings(admission, current)
            try:
                self._variables(policy, bindings)
                operations = self._run(mutation["jsonPatch"]["expression"], bindings, LIST_OF_JSONPATCH, True)
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
            if self._run(validation["expression"], bindings, BOOL) is True:
                continue
            message = validation.get("message") or "failed expression"
            if "messageExpression" in validation:
                with contextlib.suppress(EvaluationFailed):  # the apiserver falls back to message
                    message = self._run(validation["messageExpression"], bindings, STRING) or message
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
