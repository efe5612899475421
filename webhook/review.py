"""The AdmissionReview v1 wire contract, in one place (admission.k8s.io/v1).

`parse_review` turns request bytes into a ParsedReview or raises ReviewError with a
message that says exactly what is wrong (the server answers 400 with it).
`build_response` turns an engine Decision into the response bytes, `error_response` refuses.
Both webhooks speak it: the admission server (webhook.server) and the policy check (webhook.policies).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.engine import AdmissionInput, ClusterContext, Decision

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
# Past this many characters in all, the apiserver cuts every warning of the response to 256 characters
# and drops the rest (DESIGN section 6): below it, each warning is kept whole, however long.
MAX_WARNINGS_TOTAL = 4096


class ReviewError(ValueError):
    """The body is not a well-formed AdmissionReview v1."""


@dataclass(frozen=True, slots=True)
class ParsedReview:
    uid: str
    operation: str
    kind: str
    namespace: str | None
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    sub_resource: str
    dry_run: bool
    request: dict[str, Any]  # the CEL `request` variable: the AdmissionRequest without the objects

    def to_input(
        self,
        namespace_object: dict[str, Any] | None = None,
        cluster: ClusterContext | None = None,
        json_commas: int | None = None,
    ) -> AdmissionInput:
        """The engine's input for this request, whole: its Namespace and cluster context (None:
        unknown), and the commas of the body it was parsed from (None: not counted)."""
        return AdmissionInput.from_request(
            self.request,
            self.object,
            self.old_object,
            operation=self.operation,
            namespace=self.namespace,
            kind=self.kind,
            sub_resource=self.sub_resource,
            namespace_object=namespace_object,
            cluster=cluster,
            json_commas=json_commas,
        )


def parse_review(body: bytes) -> ParsedReview:
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise ReviewError(f"body is not valid JSON: {error}") from None
    if not isinstance(review, dict):
        raise ReviewError(f"body must be a JSON object, got {_type(review)}")
    if review.get("apiVersion") != API_VERSION:
        raise ReviewError(f"apiVersion must be {API_VERSION!r}, got {review.get('apiVersion')!r}")
    if review.get("kind") != KIND:
        raise ReviewError(f"kind must be {KIND!r}, got {review.get('kind')!r}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError(f"request must be an object, got {_type(request)}")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid must be a non-empty string")
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise ReviewError(f"request.operation must be one of {', '.join(sorted(OPERATIONS))}, got {operation!r}")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str) or not kind["kind"]:
        raise ReviewError("request.kind must be an object with a non-empty string field kind")
    obj = request.get("object")
    old = request.get("oldObject")
    if obj is None and operation not in ("DELETE", "CONNECT"):
        raise ReviewError(f"request.object must be an object on {operation}, got null")
    if obj is not None and not isinstance(obj, dict):
        raise ReviewError(f"request.object must be an object or null, got {_type(obj)}")
    if old is not None and not isinstance(old, dict):
        raise ReviewError(f"request.oldObject must be an object or null, got {_type(old)}")
    if operation == "UPDATE" and old is None:
        raise ReviewError("request.oldObject must be an object on UPDATE")
    namespace = request.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise ReviewError(f"request.namespace must be a string, got {_type(namespace)}")
    sub_resource = request.get("subResource") or ""
    if not isinstance(sub_resource, str):
        raise ReviewError(f"request.subResource must be a string, got {_type(sub_resource)}")
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise ReviewError(f"request.dryRun must be a boolean, got {_type(dry_run)}")
    user_info = request.get("userInfo")
    if user_info is not None and not isinstance(user_info, dict):
        raise ReviewError(f"request.userInfo must be an object, got {_type(user_info)}")
    return ParsedReview(
        uid=uid,
        operation=operation,
        kind=kind["kind"],
        namespace=namespace or None,
        object=obj,
        old_object=old,
        sub_resource=sub_resource,
        dry_run=dry_run,
        request={k: v for k, v in request.items() if k not in ("object", "oldObject")},
    )


def build_response(uid: str, decision: Decision, include_patch: bool) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {"code": 403, "message": denial_message(decision)}
    elif include_patch and decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode("ascii")
    warnings = warning_lines(decision)
    if warnings:
        response["warnings"] = warnings
    if decision.audits or decision.excepted:
        response["auditAnnotations"] = audit_annotations(decision)
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def error_response(uid: str, code: int, message: str) -> bytes:
    """A well-formed answer that refuses the request (used when evaluation itself broke)."""
    response = {"uid": uid, "allowed": False, "status": {"code": code, "message": message}}
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def denial_message(decision: Decision) -> str:
    return "gpu-webhook denied the request: " + decision.denial_message


def warning_lines(decision: Decision) -> list[str]:
    """Warn violations, then the rules a GPUPolicyException let through ("[rule] excepted by ns/name: why"):
    the user who applies the object sees an exception at work, not a silent pass."""
    lines: list[str] = []
    total = 0
    found = [f"[{warning.rule}] {warning.message}" for warning in decision.warnings]
    found.extend(f"[{rule}] {verdict}" for rule, verdict in decision.excepted.items())
    for text in found:
        if total + len(text) > MAX_WARNINGS_TOTAL:
            if not lines:  # one warning longer than all may be: cut it here, not every one to 256
                lines.append(_shorten(text, MAX_WARNINGS_TOTAL))
            break  # keep the ones that fit whole rather than let the apiserver cut all of them
        lines.append(text)
        total += len(text)
    return lines


def audit_annotations(decision: Decision) -> dict[str, str]:
    annotations: dict[str, str] = {}
    for audit in decision.audits:
        previous = annotations.get(audit.rule)
        annotations[audit.rule] = f"{previous}; {audit.message}" if previous else audit.message
    annotations.update(decision.excepted)  # an excepted rule has no findings of its own: its key is free
    return annotations


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )
