"""namespaceObject in a running server comes from the watch cache, kept current, and gates readiness."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import jsonpatch
import pytest
import yaml

from tests.support import EXAMPLES, RULES, LiveServer, client_ssl, free_port, make_review, start_server
from tests.support.kubestub import KubeStub
from webhook.kube import NamespaceCache, connect

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@pytest.fixture
def stub() -> Iterator[KubeStub]:
    server = KubeStub().start()
    server.add("team-a", labels={"team": "llm"}, annotations={"gpu-webhook.io/queue": "team-a-gpu"})
    yield server
    server.stop()


@pytest.fixture
def kubeconfig(stub: KubeStub, tmp_path: Path) -> Path:
    return stub.kubeconfig(tmp_path / "kubeconfig")


def gpu_job() -> dict:
    return next(d for d in yaml.safe_load_all((EXAMPLES / "job-finetune.yaml").read_text()) if d and d["kind"] == "Job")


async def queue_of(live: LiveServer) -> str | None:
    """The queue label the webhook gives a new GPU Job in team-a, read from the patched Job."""
    job = gpu_job()
    job["metadata"]["namespace"] = "team-a"
    answer = await live.review("mutate", make_review(job, namespace="team-a"))
    patch = json.loads(base64.b64decode(answer["response"]["patch"])) if "patch" in answer["response"] else []
    return jsonpatch.apply_patch(job, patch)["metadata"].get("labels", {}).get(QUEUE_LABEL)


async def test_queue_label_comes_from_the_live_namespace(
    cert_dir: Path, rules_dir: Path, stub: KubeStub, kubeconfig: Path
) -> None:
    cache = NamespaceCache(connect(str(kubeconfig)), backoff_initial=0.01)
    server = await start_server(cert_dir, rules_dir, namespaces=cache)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
            live = LiveServer(server, session)
            for _ in range(250):
                if (await live.get("/readyz"))[0] == 200:
                    break
                await asyncio.sleep(0.02)
            detail = json.loads((await live.get("/readyz"))[1])
            assert detail["namespaces"]["synced"] is True
            assert await queue_of(live) == "team-a-gpu"
            stub.modify("team-a", annotations={"gpu-webhook.io/queue": "team-a-burst"})
            for _ in range(250):
                if await queue_of(live) == "team-a-burst":
                    break
                await asyncio.sleep(0.02)
            assert await queue_of(live) == "team-a-burst"
            assert "gpu_webhook_namespace_cache_synced 1.0" in (await live.get("/metrics"))[1]
    finally:
        await server.stop()


def test_serve_watches_namespaces_when_given_a_kubeconfig(cert_dir: Path, kubeconfig: Path, stub: KubeStub) -> None:
    import ssl
    import urllib.request

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook.cli", "serve", "--port", str(port), "--cert-dir", str(cert_dir),
         "--rules", str(RULES), "--kubeconfig", str(kubeconfig), "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        deadline = time.monotonic() + 15
        detail = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"https://localhost:{port}/readyz", context=context, timeout=2) as response:
                    detail = json.loads(response.read())
                    break
            except (OSError, urllib.error.HTTPError):
                time.sleep(0.1)
        assert detail is not None and detail["namespaces"]["synced"] is True
        assert any(r.startswith("list") for r in stub.requests)
    finally:
        process.terminate()
        process.wait(timeout=10)
