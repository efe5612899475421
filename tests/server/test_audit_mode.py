"""serve --mode audit: nothing is denied, every would-be denial is recorded, counted and logged."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from tests.support import LiveServer, client_ssl, cpu_pod, make_review, start_server
from webhook.engine import Mode


async def test_audit_mode_allows_and_records_would_be_denials(
    cert_dir: Path, rules_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = await start_server(cert_dir, rules_dir, mode=Mode.AUDIT)
    pod = cpu_pod("leaky")
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
            live = LiveServer(server, session)
            with caplog.at_level(logging.INFO, logger="gpu_webhook"):
                answer = (await live.review("validate", make_review(pod)))["response"]
            assert answer["allowed"] is True
            assert "status" not in answer
            assert "without requesting a GPU" in answer["auditAnnotations"]["no-visible-devices-without-gpu"]
            metrics = (await live.get("/metrics"))[1]
            assert (
                'gpu_webhook_rule_results_total{action="would_deny",rule="no-visible-devices-without-gpu"} 1.0'
                in metrics
            )
            assert 'decision="allowed"' in metrics and 'decision="denied"' not in metrics
    finally:
        await server.stop()
    (record,) = [r for r in caplog.records if r.getMessage() == "admission decision"]
    assert record.levelno == logging.INFO
    assert record.wouldDeny[0].startswith("no-visible-devices-without-gpu: pod leaky")


async def test_enforce_mode_denies_the_same_pod(live_server: LiveServer) -> None:
    pod = cpu_pod("leaky")
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    answer = (await live_server.review("validate", make_review(pod)))["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    metrics = (await live_server.get("/metrics"))[1]
    assert 'gpu_webhook_rule_results_total{action="deny",rule="no-visible-devices-without-gpu"} 1.0' in metrics
