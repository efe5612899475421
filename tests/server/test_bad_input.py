"""Malformed AdmissionReviews get a 4xx that says what is wrong, and the server keeps serving."""

from __future__ import annotations

import asyncio
import json

import orjson
import pytest

from tests.support import LiveServer, cpu_pod, make_review


def review_with(**request_overrides: object) -> bytes:
    review = make_review(cpu_pod())
    review["request"].update(request_overrides)
    return orjson.dumps(review)


def without(field: str) -> bytes:
    review = make_review(cpu_pod())
    del review["request"][field]
    return orjson.dumps(review)


CASES = [
    (b"", "body is not valid JSON"),
    (b"{not json", "body is not valid JSON"),
    (
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "x"',
        "body is not valid JSON",
    ),
    (b"\xff\xfe\x00garbage", "body is not valid JSON"),
    (b"[1, 2, 3]", "body must be a JSON object, got array"),
    (b'"a string"', "body must be a JSON object, got string"),
    (
        orjson.dumps({**make_review(cpu_pod()), "apiVersion": "admission.k8s.io/v1beta1"}),
        "apiVersion must be 'admission.k8s.io/v1'",
    ),
    (orjson.dumps({**make_review(cpu_pod()), "kind": "Pod"}), "kind must be 'AdmissionReview'"),
    (
        orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        "request must be an object, got null",
    ),
    (
        orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}),
        "request must be an object, got array",
    ),
    (without("uid"), "request.uid must be a non-empty string"),
    (review_with(uid=""), "request.uid must be a non-empty string"),
    (review_with(uid=42), "request.uid must be a non-empty string"),
    (review_with(operation="PATCH"), "request.operation must be one of"),
    (without("kind"), "request.kind must be an object"),
    (review_with(kind="Pod"), "request.kind must be an object"),
    (review_with(object=None), "request.object must be an object on CREATE, got null"),
    (review_with(object="pod"), "request.object must be an object or null, got string"),
    (review_with(object=[1]), "request.object must be an object or null, got array"),
    (review_with(oldObject=5), "request.oldObject must be an object or null, got number"),
    (review_with(operation="UPDATE"), "request.oldObject must be an object on UPDATE"),
    (review_with(namespace=["a"]), "request.namespace must be a string, got array"),
    (review_with(dryRun="yes"), "request.dryRun must be a boolean, got string"),
    (review_with(userInfo="root"), "request.userInfo must be an object, got string"),
    (b"[" * 10_000 + b"]" * 10_000, "body is not valid JSON"),
]


@pytest.mark.parametrize(("body", "expected"), CASES, ids=range(len(CASES)))
async def test_malformed_review_gets_400_with_reason_then_good_request_succeeds(
    live_server: LiveServer, body: bytes, expected: str
) -> None:
    for endpoint in ("mutate", "validate"):
        status, text = await live_server.post_raw(endpoint, body, headers={"Content-Type": "application/json"})
        assert status == 400, text
        assert expected in json.loads(text)["error"]
    answer = await live_server.review("validate", make_review(cpu_pod()))
    assert answer["response"]["allowed"] is True


async def test_body_over_3_mib_gets_413(live_server: LiveServer) -> None:
    review = make_review(cpu_pod())
    review["request"]["object"]["metadata"]["annotations"] = {"big": "x" * (3 * 1024 * 1024)}
    status, text = await live_server.post_raw("validate", orjson.dumps(review))
    assert status == 413
    assert "exceeds" in text
    assert (await live_server.review("validate", make_review(cpu_pod())))["response"]["allowed"] is True


async def test_wrong_method_and_unknown_path_are_client_errors(live_server: LiveServer) -> None:
    assert (await live_server.get("/mutate"))[0] == 405
    assert (await live_server.get("/nope"))[0] == 404


async def test_slow_sender_is_cut_off_and_others_are_served(live_server: LiveServer) -> None:
    live_server.server.state.config.body_timeout = 0.3

    async def trickle() -> object:
        yield b'{"apiVersion": '
        await asyncio.sleep(2)
        yield b'"admission.k8s.io/v1"}'

    slow = asyncio.create_task(live_server.post_raw("validate", trickle()))
    await asyncio.sleep(0.05)
    # the slow one does not hold up anybody else
    answer = await live_server.review("validate", make_review(cpu_pod()))
    assert answer["response"]["allowed"] is True
    status, text = await slow
    assert status == 408, text
