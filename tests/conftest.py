"""Fixtures every test area shares: a throw-away CA, a copy of the rules, a live HTTPS server."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support import RULES, LiveServer, client_ssl, start_server
from webhook.certs import generate_bundle, write_bundle


@pytest.fixture(scope="session")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), directory)
    return directory


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """A private copy of the default rule pack that a test may edit or break."""
    target = tmp_path / "rules"
    shutil.copytree(RULES, target, ignore=shutil.ignore_patterns("tests"))
    return target


@pytest.fixture
async def live_server(cert_dir: Path, rules_dir: Path) -> AsyncIterator[LiveServer]:
    server = await start_server(cert_dir, rules_dir)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
        yield LiveServer(server, session)
    await server.stop()
