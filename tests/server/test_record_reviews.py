"""serve --record-reviews DIR: the AdmissionReviews received, written as they arrived, bounded, private."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import aiohttp

from tests.support import LiveServer, client_ssl, gpu_pod, make_review, start_server


async def test_received_reviews_are_written_as_received_until_the_limit(
    cert_dir: Path, rules_dir: Path, tmp_path: Path
) -> None:
    directory = tmp_path / "recorded"
    server = await start_server(cert_dir, rules_dir, record_reviews=str(directory), record_reviews_max=2)
    bodies = [json.dumps(make_review(gpu_pod(f"p{i}"), namespace="team-a")).encode() for i in range(3)]
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
            live = LiveServer(server, session)
            for endpoint, body in zip(("mutate", "validate", "validate"), bodies, strict=True):
                status, _ = await live.post_raw(endpoint, body, headers={"Content-Type": "application/json"})
                assert status == 200  # recording never changes the answer, nor stops the third
    finally:
        await server.stop()
    files = sorted(directory.iterdir())
    assert [f.name.split("-", 1)[1] for f in files] == ["00001-mutate.json", "00002-validate.json"]
    assert [f.read_bytes() for f in files] == bodies[:2]  # byte for byte; the third is past the limit
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)


async def test_nothing_is_recorded_by_default(cert_dir: Path, rules_dir: Path, tmp_path: Path) -> None:
    server = await start_server(cert_dir, rules_dir)
    try:
        assert server.state.recorder is None
    finally:
        await server.stop()


def test_serve_documents_the_option() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--record-reviews DIR" in help_text and "debugging aid" in help_text
