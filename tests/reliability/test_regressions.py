"""One test per bug the fuzzers found, each written before its fix."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.support import cpu_pod, gpu_pod, make_review
from webhook.engine import AdmissionInput, Phase, evaluate, load_rules
from webhook.review import ReviewError, parse_review

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.mark.parametrize("operation", [{"x": 1}, ["CREATE"]])
def test_unhashable_operation_is_a_400_not_a_crash(operation: object) -> None:
    review = make_review(cpu_pod())
    review["request"]["operation"] = operation
    with pytest.raises(ReviewError, match=r"request\.operation must be one of"):
        parse_review(orjson.dumps(review))


@pytest.mark.parametrize("kind", [["Pod"], {"kind": "Pod"}, 7, None])
def test_object_kind_of_the_wrong_type_does_not_break_evaluation(kind: object) -> None:
    ruleset = load_rules(RULES).ruleset
    pod = gpu_pod()
    pod["kind"] = kind
    decision = evaluate(ruleset, AdmissionInput(object=pod, kind="Pod", namespace="team-a"), Phase.ALL)
    assert isinstance(decision.allowed, bool)


@pytest.mark.parametrize("partial", [b"", b"POST /validate HTTP/1.1\r\nHost: loc"])
async def test_connection_that_never_finishes_its_headers_is_closed(cert_dir: Path, partial: bytes) -> None:
    # Found by the abuse fuzzer: aiohttp's default keep-alive timeout is an hour, so a client that
    # connects and stalls (slowloris) held a connection and a file descriptor for an hour.
    import asyncio
    import time

    from tests.support import client_ssl, start_server

    server = await start_server(cert_dir, RULES, idle_timeout=0.5)
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=client_ssl(cert_dir), server_hostname="localhost"
        )
        writer.write(partial)
        await writer.drain()
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(100), 5) == b""  # closed by the server
        assert time.monotonic() - started < 2
        writer.transport.abort()
    finally:
        await server.stop()


def test_mutating_an_object_nested_deeper_than_orjson_writes_does_not_crash() -> None:
    # orjson parses 1,024 levels but writes only 255; the copy fell back to copy.deepcopy,
    # which hit Python's recursion limit around 500 levels: a refusal with code 500.
    ruleset = load_rules(RULES).ruleset
    pod = gpu_pod()
    deep: object = "bottom"
    for _ in range(1000):
        deep = {"x": deep}
    pod["spec"]["containers"][0]["deep"] = deep
    decision = evaluate(ruleset, AdmissionInput(object=pod, kind="Pod", namespace="team-a"), Phase.MUTATE)
    assert decision.allowed and decision.patch


async def test_client_gone_mid_body_is_counted_not_logged_as_a_server_error(
    live_server, cert_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by bench/fuzz.py: each such client left an "Error handling request" traceback at ERROR.
    import asyncio
    import logging

    from tests.support import client_ssl

    body = orjson.dumps(make_review(cpu_pod()))
    head = f"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    caplog.set_level(logging.ERROR)
    for _ in range(5):
        _, writer = await asyncio.open_connection(
            "127.0.0.1", live_server.server.port, ssl=client_ssl(cert_dir), server_hostname="localhost"
        )
        writer.write(head + body[:50])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()
    await asyncio.sleep(0.2)
    assert live_server.server.state.in_flight == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    metrics = (await live_server.get("/metrics"))[1]
    assert 'gpu_webhook_bad_requests_total{code="499"} 5.0' in metrics


async def test_a_mismatched_certificate_pair_keeps_the_old_one_serving(tmp_path: Path) -> None:
    # Found by the fault test: load_cert_chain() into the live context replaced the certificate
    # before failing on the key, so every later handshake failed until a good pair arrived.
    import asyncio

    import aiohttp

    from tests.support import client_ssl, start_server
    from webhook.certs import CERT_FILE, generate_bundle, write_bundle

    live_dir, other_dir = tmp_path / "live", tmp_path / "other"
    write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), live_dir)
    write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), other_dir)
    server = await start_server(live_dir, RULES)
    try:
        store = server.state.certs
        assert store is not None
        (live_dir / CERT_FILE).write_bytes((other_dir / CERT_FILE).read_bytes())  # the cert arrives first
        assert await asyncio.to_thread(store.load) is False
        assert "mismatch" in store.error
        connector = aiohttp.TCPConnector(ssl=client_ssl(live_dir))  # trusts the old CA only
        async with aiohttp.ClientSession(connector=connector) as session:
            url = f"https://localhost:{server.port}/validate"
            async with session.post(url, json=make_review(cpu_pod())) as response:
                assert response.status == 200
    finally:
        await server.stop()


async def test_declared_oversized_body_gets_413_at_once(live_server, cert_dir: Path) -> None:
    # Found by bench/fuzz.py: a Content-Length of 99999999999 waited for the body timeout (408)
    # instead of being refused from the header alone.
    import asyncio
    import time

    from tests.support import client_ssl

    reader, writer = await asyncio.open_connection(
        "127.0.0.1", live_server.server.port, ssl=client_ssl(cert_dir), server_hostname="localhost"
    )
    writer.write(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999999\r\n\r\n{")
    await writer.drain()
    started = time.monotonic()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    writer.transport.abort()
    assert status_line.startswith(b"HTTP/1.1 413"), status_line
    assert time.monotonic() - started < 1


async def test_malformed_http_is_logged_as_info_without_a_traceback(
    live_server, cert_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by bench/fuzz.py: aiohttp logs every malformed HTTP message (bad chunk sizes, bad
    # headers) at ERROR with a traceback, so any client could fill the logs with fake alarms.
    import asyncio
    import logging

    from tests.support import client_ssl

    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", live_server.server.port, ssl=client_ssl(cert_dir), server_hostname="localhost"
    )
    writer.write(
        b"POST /validate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
    )
    await writer.drain()
    assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.0 400")
    writer.transport.abort()
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]
    assert any("malformed HTTP request" in r.getMessage() for r in caplog.records)


async def test_certificate_is_swapped_on_the_event_loop_thread(tmp_path: Path) -> None:
    # Found by bench/faults.py (1 failed handshake in 25,118 requests): loading the pair into the
    # live context from a worker thread let a handshake on the loop see the new certificate with
    # the old key. On the loop thread no handshake can run between the two.
    import asyncio
    import threading

    from tests.support import start_server
    from webhook.certs import generate_bundle, write_bundle

    write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), tmp_path)
    server = await start_server(tmp_path, RULES)
    try:
        store = server.state.certs
        assert store is not None
        threads: list[threading.Thread] = []
        original = store.load
        store.load = lambda: (threads.append(threading.current_thread()), original())[1]  # type: ignore[method-assign]
        write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), tmp_path)
        for _ in range(100):
            if threads:
                break
            await asyncio.sleep(0.05)
        assert threads == [threading.current_thread()]
    finally:
        await server.stop()
