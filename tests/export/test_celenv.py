"""celenv's create-time type check agrees with the real kube-apiserver on the forms export generates.

The verdicts below were taken on kube-apiserver v1.36.2 (dry-run creates of a MutatingAdmissionPolicy
or ValidatingAdmissionPolicy with the one expression); tests/e2e/test_export_native.py re-takes them
on every run with KUBEBUILDER_ASSETS set, so this table cannot drift from the apiserver unnoticed.
"""

from __future__ import annotations

import re

import pytest

from tests.export.apiserver import Apiserver, PolicyRefused
from tests.export.native_site import not_exceptable
from tests.support import RULES
from webhook.engine import AdmissionInput, load_rules
from webhook.export import CLAIMS_UNRESOLVED, export
from webhook.export.celenv import BOOL, LIST_OF_JSONPATCH, STRING, CompileError, NativeEnvironment, jsonpatch_calls

JP = "JSONPatch{op: 'add', path: '/metadata/labels/x', value: 'y'}"
# (what the apiserver requires, expression, the type it reports; None: it accepts the expression)
APISERVER_VERDICTS: tuple[tuple[str, str, str | None], ...] = (
    (LIST_OF_JSONPATCH, f"[{JP}]", None),
    (LIST_OF_JSONPATCH, f"object.kind == 'Pod' ? [{JP}] : []", None),
    (LIST_OF_JSONPATCH, f"[{JP}] + []", None),
    (LIST_OF_JSONPATCH, f"[1].filter(x, x == 2).map(x, {JP})", None),
    (LIST_OF_JSONPATCH, "[JSONPatch{op: 'add', path: '/metadata/labels/x', value: dyn(object.metadata.name)}]", None),
    (LIST_OF_JSONPATCH, "[JSONPatch{op: 'remove', path: '/spec/priority'}]", None),
    # the form export uses for "a patch, or an error": an index that fails to convert
    (LIST_OF_JSONPATCH, f"[1].map(x, [{JP}][object.kind == 'Pod' ? 0 : int('x' + object.kind)])", None),
    # the form export used before: a dyn() branch makes the item type dyn (the three refused policies)
    (LIST_OF_JSONPATCH, f"[1].map(x, object.kind == 'Pod' ? {JP} : dyn(int('x')))", "list(dyn)"),
    (LIST_OF_JSONPATCH, f"dyn([{JP}])", "dyn"),
    (LIST_OF_JSONPATCH, "[]", "list(dyn)"),
    (BOOL, "dyn(true)", "dyn"),
    (BOOL, "1", "int"),
    (STRING, "dyn('x')", "dyn"),
    (STRING, "1", "int"),
    (STRING, "['a']", "list(string)"),
)


# the JSONPatch library is a MutatingAdmissionPolicy's alone: in a ValidatingAdmissionPolicy this is
# "undeclared reference to 'jsonpatch'" (v1.36.2), and a MutatingAdmissionPolicy's variable accepts it
ESCAPE_KEY = "jsonpatch.escapeKey('a/b') == 'a~1b'"


@pytest.mark.parametrize(("wanted", "expression", "refused_as"), APISERVER_VERDICTS)
def test_type_check_gives_the_apiservers_verdict(wanted: str, expression: str, refused_as: str | None) -> None:
    env = NativeEnvironment()
    mutating = wanted == LIST_OF_JSONPATCH
    if refused_as is None:
        env.check_type(expression, wanted, mutating=mutating)
    else:
        with pytest.raises(CompileError, match=re.escape(f"must evaluate to {wanted} but got {refused_as}") + "$"):
            env.check_type(expression, wanted, mutating=mutating)


def test_the_jsonpatch_library_is_the_mutating_policys_alone() -> None:
    env = NativeEnvironment()
    assert env.evaluate(env.compile(ESCAPE_KEY, mutating=True), {}) is True
    with pytest.raises(CompileError, match="undeclared reference to 'jsonpatch'"):
        env.compile(ESCAPE_KEY, mutating=False)
    with pytest.raises(CompileError):
        env.compile(f"[{JP}] == []", mutating=False)


def test_jsonpatch_literals_become_calls_whatever_their_values_hold() -> None:
    text = "[JSONPatch{op: 'add',\n path: 'x' + '{',\n value: {'a': [1, 2], 'b': 'JSONPatch{'}}]"
    assert jsonpatch_calls(text) == "[gwJSONPatch_op_path_value( 'add', 'x' + '{', {'a': [1, 2], 'b': 'JSONPatch{'})]"
    with pytest.raises(CompileError, match="no field 'opp'"):
        jsonpatch_calls("[JSONPatch{opp: 'add', path: '/a'}]")


def test_every_generated_mutation_and_validation_has_the_type_the_apiserver_requires() -> None:
    """The export checks it itself (policies._check refuses a rule otherwise): nothing of the pack is
    refused for a type, in either claims mode."""
    ruleset = not_exceptable(load_rules(RULES).require())
    env = NativeEnvironment()
    for claims in ("refuse", CLAIMS_UNRESOLVED):
        result = export(ruleset, claims=claims)
        assert not [r for r in result.refused if "must evaluate to" in r.reason]
        for rule in result.rules:
            if rule.mutating is not None:
                for mutation in rule.mutating["spec"]["mutations"]:
                    env.check_type(mutation["jsonPatch"]["expression"], LIST_OF_JSONPATCH)
            if rule.validating is not None:
                for validation in rule.validating["spec"]["validations"]:
                    env.check_type(validation["expression"], BOOL, mutating=False)
                    if "messageExpression" in validation:
                        env.check_type(validation["messageExpression"], STRING, mutating=False)
                for variable in rule.validating["spec"]["variables"]:
                    env.compile(variable["expression"], mutating=False)


def test_the_simulator_refuses_to_run_a_policy_the_apiserver_would_not_store() -> None:
    policy = {
        "spec": {
            "failurePolicy": "Fail",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": f"dyn([{JP}])"}}],
        }
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": {}}
    with pytest.raises(PolicyRefused, match=r"must evaluate to list\(JSONPatch\) but got dyn"):
        Apiserver().mutate(policy, AdmissionInput.offline(pod, namespace="default"), pod)
