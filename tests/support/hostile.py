"""Malformed and adversarial AdmissionReview bodies, and the rule that judges the answers.

Shared by the CI fuzz test (a few hundred cases) and `python -m bench.fuzz` (tens of thousands).
Cases are generated from a seed, so a failure is reproduced by its seed and index.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import ssl
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from tests.support.reviews import cpu_pod, gpu_pod, make_review

MAX_BODY = 3 * 1024 * 1024


def seeds() -> list[dict[str, Any]]:
    """Valid reviews of several kinds that the mutators start from."""
    pod = gpu_pod(tolerations=[{"key": "a", "operator": "Exists"}])
    pod["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q", "a~b": "c"}
    pod["spec"]["initContainers"] = [{"name": "side", "image": "x", "restartPolicy": "Always"}]
    visible = cpu_pod()
    visible["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "team-a"},
        "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "d"}}, "spec": gpu_pod()["spec"]}},
    }
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama", "namespace": "team-a"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": gpu_pod()["spec"]}},
                "Worker": {"replicas": 4, "template": {"spec": gpu_pod(gpus=8)["spec"]}},
            }
        },
    }
    reviews = [make_review(o) for o in (pod, visible, cpu_pod(), deployment, pytorch)]
    reviews.append(make_review(gpu_pod(), operation="UPDATE", old=gpu_pod()))
    reviews.append(make_review(None, operation="DELETE", old=gpu_pod()))
    return reviews


def _paths(node: Any, max_depth: int = 40) -> Iterator[tuple[Any, ...]]:
    """Every path into node, iteratively; inside values the fuzzer nested itself, only the top."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), node)]
    while stack:
        prefix, value = stack.pop()
        yield prefix
        if len(prefix) >= max_depth:
            continue
        if isinstance(value, dict):
            stack.extend(((*prefix, key), child) for key, child in value.items())
        elif isinstance(value, list):
            stack.extend(((*prefix, index), child) for index, child in enumerate(value))


def _nested(depth: int, rng: random.Random) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"x": value}
    return value


def _wrong_value(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            True,
            0,
            -1,
            2**63 - 1,
            -(2**63),
            1.5e308,
            "",
            "x" * rng.choice([1, 64, 254, 70_000]),
            "1e999999999",
            "nvidia.com/gpu",
            "../../etc",
            "\u202e\u0000\ud7ff",
            [],
            [None, 1, "a", {}],
            {},
            {"": None, "/": {"~": []}},
            _nested(rng.choice([10, 200, 900]), rng),
            [{"name": str(i)} for i in range(rng.choice([5, 1500]))],
        ]
    )


def _set(document: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return document


@dataclass
class Case:
    kind: str
    body: bytes
    uid: str | None  # the uid a 200 answer must echo, when the body still carries one


def field_mutation(rng: random.Random, base: dict[str, Any]) -> Case:
    review = copy.deepcopy(base)
    paths = list(_paths(review))
    for _ in range(rng.choice([1, 1, 2, 3])):
        paths = list(_paths(review))
        path = rng.choice(paths)
        review = _set(review, path, _wrong_value(rng), delete=bool(path) and rng.random() < 0.25)
    request = review.get("request") if isinstance(review, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    try:
        body = orjson.dumps(review)
    except orjson.JSONEncodeError:  # deeper than orjson writes: the stdlib encoder goes further
        try:
            body = json.dumps(review).encode()
        except RecursionError:  # mutations stacked nesting on nesting: send a deep body instead
            body = orjson.dumps(base)[:-2] + b',"x":' + b"[" * 3000 + b"]" * 3000 + b"}}"
    return Case("field", body, uid if isinstance(uid, str) else None)


def case(rng: random.Random, reviews: list[dict[str, Any]]) -> Case:
    base = rng.choice(reviews)
    valid = orjson.dumps(base)
    choice = rng.random()
    if choice < 0.55:
        return field_mutation(rng, base)
    if choice < 0.65:
        return Case("truncated", valid[: rng.randrange(len(valid))], None)
    if choice < 0.72:
        cut = rng.randrange(len(valid))
        garbage = rng.choice(
            [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", bytes(rng.randrange(256) for _ in range(8))]
        )
        return Case("bytes", valid[:cut] + garbage + valid[cut:], None)
    if choice < 0.78:
        depth = rng.choice([1_000, 10_000, 100_000])
        opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
        inner = opener * depth + b"1" + closer * depth
        return Case("deep", valid[:-2] + b',"deep":' + inner + b"}}", None)
    if choice < 0.84:
        # duplicate keys: the parser keeps one of them; either way the answer must be well-formed
        request = orjson.dumps(base["request"])
        other = orjson.dumps({**base["request"], "operation": "DELETE", "object": None})
        first, second = rng.sample([request, other], 2)
        body = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":' + first
        return Case("duplicate", body + b',"request":' + second + b"}", None)
    if choice < 0.90:
        review = copy.deepcopy(base)
        obj = review["request"].get("object") or review["request"]["oldObject"]
        obj.setdefault("metadata", {})["annotations"] = {"big": "x" * rng.choice([100_000, 1_000_000, 2_500_000])}
        return Case("huge-string", orjson.dumps(review), review["request"]["uid"])
    if choice < 0.93:
        return Case("random", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 512))), None)
    if choice < 0.96:
        return Case("scalar", rng.choice([b"null", b"0", b"true", b'"x"', b"[]", b"{}", b"1e999", b"-"]), None)
    # just over the apiserver's limit; rare, because each one moves 3 MiB
    return Case("oversized", valid[:-1] + b',"pad":"' + b"x" * (MAX_BODY - len(valid) + 10) + b'"}', None)


def cases(count: int, seed: int) -> Iterator[Case]:
    rng = random.Random(seed)
    reviews = seeds()
    for _ in range(count):
        yield case(rng, reviews)


def verdict(case: Case, status: int, text: str) -> str | None:
    """None when the answer is acceptable, else what is wrong with it."""
    if "Traceback" in text or 'File "' in text:
        return f"traceback in a {status} answer"
    if status >= 500:
        return f"HTTP {status}"
    if case.kind == "oversized" and status != 413:
        return f"oversized body got {status}"
    if status != 200:
        return None if 400 <= status < 500 else f"HTTP {status}"
    try:
        answer = orjson.loads(text)
        response = answer["response"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return "200 without an AdmissionReview response"
    if not isinstance(response.get("allowed"), bool):
        return "response.allowed is not a boolean"
    if case.uid is not None and response.get("uid") != case.uid:
        return "response.uid does not echo the request"
    if (response.get("status") or {}).get("code") == 500:
        return f"evaluation failed: {response['status'].get('message')}"
    return None


async def send_cases(
    base: str, context: ssl.SSLContext, batch: Iterable[Case], concurrency: int = 8
) -> tuple[Counter[str], list[str]]:
    """POST every case to /mutate or /validate; count answers by kind and status, list the bad ones."""
    import aiohttp

    counts: Counter[str] = Counter()
    failures: list[str] = []
    queue: asyncio.Queue[tuple[int, Case]] = asyncio.Queue()
    for item in enumerate(batch):
        queue.put_nowait(item)

    async def worker(session: aiohttp.ClientSession, endpoint: str) -> None:
        while not queue.empty():
            index, case = queue.get_nowait()
            try:
                async with session.post(f"{base}/{endpoint}", data=case.body) as response:
                    status, text = response.status, await response.text(errors="replace")
            except aiohttp.ClientError as error:
                if case.kind == "oversized":  # the server may answer 413 and close before reading it all
                    counts[f"{case.kind} closed"] += 1
                    continue
                failures.append(f"case {index} ({case.kind}): {type(error).__name__}: {error}")
                continue
            counts[f"{case.kind} {status}"] += 1
            problem = verdict(case, status, text)
            if problem:
                failures.append(f"case {index} ({case.kind}) -> {problem}: {text[:300]}")

    connector = aiohttp.TCPConnector(ssl=context, limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(session, ("mutate", "validate")[i % 2]) for i in range(concurrency)))
    return counts, failures


ABUSES = (
    "trickle",
    "stall-headers",
    "stall-body",
    "disconnect-body",
    "disconnect-headers",
    "length-lie",
    "bad-chunks",
    "plain-http",
    "garbage-handshake",
    "huge-length",
)


async def abuse(host: str, port: int, context: ssl.SSLContext, kind: str, rng: random.Random) -> str:
    """One misbehaving client on a raw connection; returns what the server did (never raises)."""
    body = orjson.dumps(rng.choice(seeds()))
    head = (
        f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    writer = None
    try:
        if kind in ("plain-http", "garbage-handshake"):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(head + body if kind == "plain-http" else bytes(rng.randrange(256) for _ in range(300)))
        else:
            reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname="localhost")
            if kind == "trickle":  # slower than the body timeout allows
                writer.write(head)
                for byte in body[:40]:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(0.02)
            elif kind == "stall-headers":
                writer.write(head[: len(head) // 2])
            elif kind == "stall-body":
                writer.write(head + body[: len(body) // 2])
            elif kind == "disconnect-headers":
                writer.write(head[:20])
                await writer.drain()
                writer.transport.abort()
                return "aborted"
            elif kind == "disconnect-body":
                writer.write(head + body[: rng.randrange(1, len(body))])
                await writer.drain()
                writer.transport.abort()
                return "aborted"
            elif kind == "length-lie":
                writer.write(head.replace(f"{len(body)}".encode(), f"{len(body) * 2}".encode()) + body)
            elif kind == "bad-chunks":
                writer.write(
                    b"POST /validate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"zz\r\nhello\r\n0\r\n\r\n"
                )
            elif kind == "huge-length":
                writer.write(head.replace(f"{len(body)}".encode(), b"99999999999") + body)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(4096), 3.0)
        return data.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"
    except TimeoutError:
        return "no answer within 3s"
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as error:
        return f"connection error {type(error).__name__}"
    finally:
        if writer is not None:
            writer.transport.abort()


def abuse_verdict(kind: str, outcome: str) -> str | None:
    """5xx or a hang is a failure; a 4xx, a close or a refused handshake is the right answer."""
    if outcome.startswith("HTTP/1.1 5"):
        return outcome
    if outcome == "no answer within 3s" and kind not in ("stall-headers", "stall-body", "length-lie"):
        return outcome  # those three wait on the client by design; the body/keep-alive timeouts end them
    return None


def elapsed(started: float) -> str:
    return f"{time.perf_counter() - started:.1f}s"
