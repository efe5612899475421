"""`idempotent()` of tests/export/equivalence.py: what the reinvocation check says when the second
application of a MutatingAdmissionPolicy fails, changes the object, or changes nothing.

The apiserver reinvokes mutating admission when a later one changed the object (reinvocationPolicy
IfNeeded; kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/
dispatcher.go), so a policy whose second application raises fails the user's request."""

from __future__ import annotations

from typing import Any

import pytest

from tests.export.apiserver import Apiserver
from tests.export.equivalence import EXTRA_RULES, idempotent
from tests.export.native_site import not_exceptable
from tests.support import gpu_pod
from webhook.engine import AdmissionInput, load_rules
from webhook.export import export
from webhook.export.policies import NativeRule

TENANT = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "labels": {"gpu-webhook.io/tenant": "true"}},
}


class SecondCall(Apiserver):
    """The model, with what its second application of a policy does replaced."""

    def __init__(self, second: str) -> None:
        super().__init__()
        self.second, self.calls = second, 0

    def mutate(self, policy: dict[str, Any], admission: AdmissionInput, obj: dict[str, Any]) -> tuple[dict, list[str]]:
        self.calls += 1
        once = super().mutate(policy, admission, obj)
        if self.calls == 2 and self.second == "raises":
            raise ValueError("the reinvocation failed")
        if self.calls == 2 and self.second == "changes":
            return {**once[0], "changed": True}, once[1]
        return once


@pytest.fixture(scope="module")
def placement() -> NativeRule:
    (native,) = [r for r in export(not_exceptable(load_rules(EXTRA_RULES).require())).rules if r.rule == "tenant-placement"]
    assert native.mutating is not None
    return native


def admission() -> AdmissionInput:
    pod = gpu_pod()
    pod["metadata"]["namespace"] = "team-a"
    return AdmissionInput.offline(pod, namespace_object=TENANT)


def test_a_policy_applied_twice_the_same_is_idempotent(placement: NativeRule) -> None:
    server = SecondCall("same")
    assert idempotent(placement, server, admission())
    assert server.calls == 2


@pytest.mark.parametrize("second", ["raises", "changes"])
def test_a_second_application_that_fails_or_changes_the_object_is_not_idempotent(
    placement: NativeRule, second: str
) -> None:
    assert not idempotent(placement, SecondCall(second), admission())
