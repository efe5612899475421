"""The AdmissionReview v1 contract (webhook/review.py) on reviews that parse but are odd: no
userInfo, an empty kind, null optional fields, and the answers built from a decision.

The apiserver's side: kubernetes/kubernetes staging/src/k8s.io/api/admission/v1/types.go (AdmissionRequest:
uid, kind, operation, userInfo required by the type; namespace, subResource, dryRun, oldObject optional)
and staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/request/admissionreview.go (what it
sends: oldObject on UPDATE and DELETE, object null on DELETE). A review that breaks the contract is a
400 naming the field; one that keeps it must mean what it says to the rules.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import orjson
import pytest

from tests.support import gpu_pod
from webhook.engine import Action, AdmissionInput, Decision, evaluate
from webhook.engine.decision import Violation
from webhook.engine.loader import compile_documents
from webhook.kubeyaml import load_documents
from webhook.review import (
    ReviewError,
    audit_annotations,
    build_response,
    error_response,
    parse_review,
    warning_lines,
)


def review(**request: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "team-a",
        "object": gpu_pod(),
        "userInfo": {"username": "alice"},
    }
    base.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": base}


def body(document: Any) -> bytes:
    return json.dumps(document).encode()


def without(document: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        del document["request"][key]
    return document


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        (b"{", "body is not valid JSON"),
        (b"[]", "body must be a JSON object, got array"),
        (b"3", "body must be a JSON object, got number"),
        (body({**review(), "apiVersion": "admission.k8s.io/v1beta1"}), "apiVersion must be 'admission.k8s.io/v1'"),
        (body({**review(), "kind": "AdmissionResponse"}), "kind must be 'AdmissionReview', got 'AdmissionResponse'"),
        (body({**review(), "request": None}), "request must be an object, got null"),
        (body({**review(), "request": "x"}), "request must be an object, got string"),
        (body(review(uid="")), "request.uid must be a non-empty string"),
        (body(review(uid=7)), "request.uid must be a non-empty string"),
        (body(without(review(), "uid")), "request.uid must be a non-empty string"),
        (
            body(review(operation="PATCH")),
            "request.operation must be one of CONNECT, CREATE, DELETE, UPDATE, got 'PATCH'",
        ),
        (body(review(operation=None)), "request.operation must be one of"),
        (body(review(kind={"kind": ""})), "request.kind must be an object with a non-empty string field kind"),
        (body(review(kind={"group": "", "version": "v1"})), "request.kind must be an object"),
        (body(review(kind={"kind": 3})), "request.kind must be an object"),
        (body(review(kind="Pod")), "request.kind must be an object"),
        (body(without(review(), "kind")), "request.kind must be an object"),
        (body(review(object=None)), "request.object must be an object on CREATE, got null"),
        (body(without(review(), "object")), "request.object must be an object on CREATE, got null"),
        (body(review(object=[1])), "request.object must be an object or null, got array"),
        (body(review(operation="UPDATE")), "request.oldObject must be an object on UPDATE"),
        (body(review(oldObject="x")), "request.oldObject must be an object or null, got string"),
        (body(review(namespace=3)), "request.namespace must be a string, got number"),
        (body(review(subResource=["status"])), "request.subResource must be a string, got array"),
        (body(review(dryRun="true")), "request.dryRun must be a boolean, got string"),
        (body(review(dryRun=None)), "request.dryRun must be a boolean, got null"),
        (body(review(userInfo="alice")), "request.userInfo must be an object, got string"),
        (body(review(userInfo=[])), "request.userInfo must be an object, got array"),
    ],
)
def test_a_review_that_breaks_the_contract_names_the_field(sent: bytes, message: str) -> None:
    with pytest.raises(ReviewError) as raised:
        parse_review(sent)
    assert str(raised.value).startswith(message), str(raised.value)


def test_optional_fields_absent_or_null_take_their_defaults() -> None:
    parsed = parse_review(body(without(review(namespace="", subResource=None), "userInfo")))
    assert (parsed.uid, parsed.operation, parsed.kind) == ("u-1", "CREATE", "Pod")
    assert parsed.namespace is None and parsed.sub_resource == "" and parsed.dry_run is False
    assert parsed.old_object is None and parsed.object == gpu_pod()
    assert "object" not in parsed.request and "oldObject" not in parsed.request
    assert "userInfo" not in parsed.request and parsed.request["uid"] == "u-1"


def test_delete_and_connect_may_have_no_object() -> None:
    delete = parse_review(body(review(operation="DELETE", object=None, oldObject=gpu_pod(), dryRun=True)))
    assert delete.object is None and delete.old_object == gpu_pod() and delete.dry_run is True
    connect = parse_review(body(without(review(operation="CONNECT", subResource="exec"), "object")))
    assert connect.object is None and connect.sub_resource == "exec"
    update = parse_review(body(review(operation="UPDATE", oldObject=gpu_pod(), userInfo=None)))
    assert update.old_object == gpu_pod()


USER_RULE = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: only-admins}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  validate:
    expression: "has(request.userInfo) && has(request.userInfo.username) && request.userInfo.username == 'admin'"
    message: "only admins"
"""


def test_a_review_without_user_info_is_no_user_to_the_rules() -> None:
    """An apiserver always sends userInfo; one that does not must not read as anyone in particular."""
    ruleset = compile_documents(load_documents(USER_RULE, "site.yaml")).require()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}

    def decide(document: dict[str, Any]) -> Decision:
        return evaluate(ruleset, parse_review(body(document)).to_input(namespace))

    assert not decide(without(review(), "userInfo")).allowed
    assert not decide(review(userInfo={})).allowed
    assert not decide(review(userInfo={"username": "alice"})).allowed
    assert decide(review(userInfo={"username": "admin"})).allowed


def test_to_input_carries_the_request_as_sent() -> None:
    parsed = parse_review(
        body(
            review(
                kind={"group": "", "version": "v1", "kind": "Pod"},
                subResource="ephemeralcontainers",
                operation="UPDATE",
                oldObject=gpu_pod(),
            )
        )
    )
    admission = parsed.to_input()
    assert isinstance(admission, AdmissionInput)
    assert (admission.operation, admission.kind, admission.sub_resource, admission.namespace) == (
        "UPDATE",
        "Pod",
        "ephemeralcontainers",
        "team-a",
    )
    assert admission.request["userInfo"] == {"username": "alice"}


def violation(rule: str, message: str, action: Action = Action.DENY) -> Violation:
    return Violation(rule=rule, action=action, message=message, target="pod p")


def answer(data: bytes) -> dict[str, Any]:
    document = orjson.loads(data)
    assert (document["apiVersion"], document["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    return document["response"]


def test_a_denial_says_why_and_carries_no_patch() -> None:
    decision = Decision(allowed=False, violations=[violation("a", "no"), violation("b", "never")])
    decision.patch = [{"op": "add", "path": "/x", "value": 1}]
    response = answer(build_response("u-1", decision, include_patch=True))
    assert response == {
        "uid": "u-1",
        "allowed": False,
        "status": {"code": 403, "message": "gpu-webhook denied the request: [a] no; [b] never"},
    }


def test_a_patch_only_where_it_is_asked_for() -> None:
    decision = Decision(patch=[{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}])
    response = answer(build_response("u-2", decision, include_patch=True))
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == decision.patch
    assert answer(build_response("u-2", decision, include_patch=False)) == {"uid": "u-2", "allowed": True}
    assert answer(build_response("u-3", Decision(), include_patch=True)) == {"uid": "u-3", "allowed": True}


# DESIGN.md section 6 (verified on the apiserver): kubectl prints a single long warning whole, but past
# 4,096 characters in all the apiserver cuts every warning to 256: whole warnings are sent while they fit
MAX_WARNING, MAX_WARNINGS_TOTAL = 120, 4096


def test_warnings_are_kept_whole_and_capped_in_total() -> None:
    long = "x" * (MAX_WARNING * 2)  # kubectl prints a long warning whole: it is not cut to 120
    decision = Decision(warnings=[violation("w", long, Action.WARN), violation("v", "short", Action.WARN)])
    assert warning_lines(decision) == [f"[w] {long}", "[v] short"]
    many = Decision(warnings=[violation(f"r{i:03}", "z" * 200, Action.WARN) for i in range(60)])
    capped = warning_lines(many)  # whole warnings while they fit in 4,096 characters, then none
    assert capped == [f"[r{i:03}] " + "z" * 200 for i in range(len(capped))]
    assert sum(map(len, capped)) <= MAX_WARNINGS_TOTAL < sum(map(len, capped)) + len(capped[0])
    huge = "h" * (MAX_WARNINGS_TOTAL * 2)  # one warning longer than all may be: cut at the total, not dropped
    (alone,) = warning_lines(Decision(warnings=[violation("w", huge, Action.WARN)]))
    assert len(alone) == MAX_WARNINGS_TOTAL and alone.endswith("…") and alone.startswith("[w] hhh")


def test_warnings_that_fit_exactly_are_kept_and_the_first_that_does_not_ends_them() -> None:
    def warn(rule: str, length: int) -> Violation:
        return violation(rule, "w" * (length - len(rule) - 3), Action.WARN)  # "[rule] " + message

    full = [warn(f"r{i:02}", 120) for i in range(34)]  # 34 x 120 = 4,080
    exact = warning_lines(Decision(warnings=[*full, warn("last", 16)]))
    assert len(exact) == 35 and sum(map(len, exact)) == 4096
    over = warning_lines(Decision(warnings=[*full, warn("last", 17), warn("tiny", 9)]))
    assert len(over) == 34  # the one past 4,096 is dropped, and so is every one after it


def test_excepted_rules_are_warned_and_annotated() -> None:
    decision = Decision(excepted={"gpu-ceiling": "excepted by team-a/big-run: approved"})
    response = answer(build_response("u-4", decision, include_patch=True))
    assert response["warnings"] == ["[gpu-ceiling] excepted by team-a/big-run: approved"]
    assert response["auditAnnotations"] == {"gpu-ceiling": "excepted by team-a/big-run: approved"}


def test_audit_findings_of_one_rule_are_joined_in_order() -> None:
    decision = Decision(
        audits=[
            violation("cost", "no team label", Action.AUDIT),
            violation("cost", "no project label", Action.AUDIT),
            violation("other", "one", Action.AUDIT),
        ]
    )
    assert audit_annotations(decision) == {"cost": "no team label; no project label", "other": "one"}
    response = answer(build_response("u-5", decision, include_patch=False))
    assert response["auditAnnotations"] == {"cost": "no team label; no project label", "other": "one"}
    assert "warnings" not in response


def test_an_error_response_refuses_with_the_code() -> None:
    assert answer(error_response("u-6", 500, "evaluation failed")) == {
        "uid": "u-6",
        "allowed": False,
        "status": {"code": 500, "message": "evaluation failed"},
    }
