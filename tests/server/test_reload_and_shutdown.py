"""Hot reload (including the ConfigMap `..data` symlink swap) and graceful SIGTERM, seen from outside."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson

from tests.support import (
    RULES,
    HeldBodies,
    LiveServer,
    client_ssl,
    cpu_pod,
    free_port,
    gpu_pod,
    make_review,
    refuses_connections,
    wait_for,
    wait_ready,
)

BROKEN = "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: broken}\nspec:\n  match: {kinds: [Pod]}\n  validate: {expression: 'object.spec.'}\n"
WARN_ALL = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: warn-everything}
spec:
  action: Warn
  match: {kinds: [Pod]}
  validate: {expression: "false", message: "generation two"}
"""


async def test_broken_rule_file_keeps_last_good_rules_and_reports_it(live_server: LiveServer, rules_dir: Path) -> None:
    store = live_server.server.state.rules
    (rules_dir / "zz-broken.yaml").write_text(BROKEN)
    await wait_for(lambda: store.errors)
    assert store.generation == 1
    status, body = await live_server.get("/readyz")
    detail = json.loads(body)
    assert status == 200  # still serving the last good rules
    assert any("zz-broken.yaml:6:" in e and "rule broken" in e for e in detail["rules"]["lastReloadErrors"])
    metrics = (await live_server.get("/metrics"))[1]
    assert "gpu_webhook_rules_reload_failures_total 1.0" in metrics
    assert "gpu_webhook_rules_last_reload_success 0.0" in metrics
    # the old rules still deny what they denied
    pod = cpu_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert (await live_server.review("validate", make_review(pod)))["response"]["allowed"] is False
    # fixing the file brings a new generation
    (rules_dir / "zz-broken.yaml").write_text(WARN_ALL)
    await wait_for(lambda: store.generation == 2)
    answer = await live_server.review("validate", make_review(cpu_pod()))
    assert answer["response"]["warnings"] == ["[warn-everything] generation two"]


async def test_configmap_symlink_swap_is_picked_up(cert_dir: Path, tmp_path: Path) -> None:
    # kubelet's layout: ..2026_01/ holds the files, ..data -> ..2026_01, each key -> ..data/key
    mount = tmp_path / "mount"
    first = mount / "..2026_01"
    shutil.copytree(RULES, first, ignore=shutil.ignore_patterns("tests"))
    os.symlink(first.name, mount / "..data")
    for rule in sorted(first.glob("*.yaml")):
        os.symlink(f"..data/{rule.name}", mount / rule.name)
    from tests.support import start_server

    server = await start_server(cert_dir, mount)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
            live = LiveServer(server, session)
            assert "warnings" not in (await live.review("validate", make_review(cpu_pod())))["response"]
            second = mount / "..2026_02"
            shutil.copytree(first, second)
            (second / "no-visible-devices-without-gpu.yaml").write_text(WARN_ALL)
            os.symlink(second.name, mount / "..data_tmp")
            os.replace(mount / "..data_tmp", mount / "..data")  # the atomic swap
            shutil.rmtree(first)
            await wait_for(lambda: server.state.rules.generation == 2)
            answer = await live.review("validate", make_review(cpu_pod()))
            assert answer["response"]["warnings"] == ["[warn-everything] generation two"]
    finally:
        await server.stop()


async def test_sigterm_finishes_in_flight_requests(cert_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook.cli", "serve", "--port", str(port), "--cert-dir", str(cert_dir),
         "--rules", str(RULES), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
            base = f"https://localhost:{port}"
            await wait_ready(session, f"{base}/readyz")
            held = HeldBodies(orjson.dumps(make_review(gpu_pod())))

            async def send() -> int:
                async with session.post(f"{base}/mutate", data=held.body()) as response:
                    payload = await response.json()
                    assert payload["response"]["allowed"] is True and payload["response"]["patch"]
                    return response.status

            in_flight = [asyncio.create_task(send()) for _ in range(5)]
            await wait_for(lambda: held.sent == 5)  # all five are in the server, waiting for their bodies
            process.send_signal(signal.SIGTERM)
            await wait_for(lambda: refuses_connections(port))  # draining: the listener is closed
            held.release()
            assert await asyncio.gather(*in_flight) == [200] * 5
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
