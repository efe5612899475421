"""Certificate rotation under load: the serving pair is swapped the way the kubelet updates a
Secret volume (a new `..data` directory, then one atomic rename of the `..data` symlink), to a
pair from a new CA, while clients keep sending AdmissionReviews.

What it proves, with every request counted:
  - keep-alive connections opened before the swap keep working (TLS is negotiated once per
    connection; the old pair stays with them);
  - every new connection during the swap completes its handshake with a consistent pair
    (a client trusting both CAs, as the apiserver does while its caBundle holds both, never
    fails), so no request fails in between;
  - after the reload, new connections get the new certificate: a client that trusts only the
    new CA succeeds, one that trusts only the old CA is refused;
  - /metrics reports the new certificate's notAfter.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shlex
import shutil
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.support import gpu_pod, make_review, start_server, wait_for
from webhook.certs import CA_FILE, CERT_FILE, KEY_FILE, Bundle, certificate_not_after, generate_bundle, write_bundle
from webhook.cli import main

SAN = (["localhost"], ["127.0.0.1"])


def kubelet_volume(directory: Path, bundle: Bundle, version: str) -> None:
    """Publish `bundle` as a Secret volume would: ..<version>/ files, then swap ..data atomically."""
    data = directory / f"..{version}"
    write_bundle(bundle, data)
    link = directory / "..data_tmp"
    link.symlink_to(data.name)
    os.replace(link, directory / "..data")  # rename(2): readers see the old or the new set, never a mix
    for name in ("tls.crt", "tls.key", "ca.crt"):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


def trusting(*ca_dirs: Path, tmp: Path) -> ssl.SSLContext:
    """A client context that trusts exactly the CAs in `ca_dirs` and checks the host name."""
    pem = tmp / f"trust-{len(list(tmp.iterdir()))}.pem"
    pem.write_bytes(b"".join((d / CA_FILE).read_bytes() for d in ca_dirs))
    context = ssl.create_default_context(cafile=str(pem))
    context.check_hostname = True
    return context


async def post(session: aiohttp.ClientSession, base: str, **request: Any) -> None:
    async with session.post(f"{base}/mutate", json=make_review(gpu_pod()), **request) as response:
        assert response.status == 200
        body = await response.json()
        assert body["response"]["allowed"] is True


async def expiry_metric(session: aiohttp.ClientSession, base: str, **request: Any) -> float:
    async with session.get(f"{base}/metrics", **request) as response:
        for line in (await response.text()).splitlines():
            if line.startswith("gpu_webhook_certificate_expiry_timestamp_seconds "):
                return float(line.split()[1])
    raise AssertionError("no certificate expiry metric")


@pytest.mark.parametrize("round_", range(3))  # the swap races the handshakes: repeat it
async def test_swap_to_a_new_ca_under_load_fails_no_request(tmp_path: Path, rules_dir: Path, round_: int) -> None:
    old, new = generate_bundle(*SAN), generate_bundle(*SAN)
    cert_dir, trust_dir = tmp_path / "tls", tmp_path / "trust"
    cert_dir.mkdir()
    trust_dir.mkdir()
    (old_dir := tmp_path / "old").mkdir()
    (new_dir := tmp_path / "new").mkdir()
    write_bundle(old, old_dir)
    write_bundle(new, new_dir)
    kubelet_volume(cert_dir, old, "v1")

    server = await start_server(cert_dir, rules_dir)
    base = f"https://localhost:{server.port}"
    counts = {"keepalive": [0, 0], "fresh": [0, 0]}  # [ok, failed]
    failures: list[str] = []
    stop = asyncio.Event()

    async def loop(name: str, session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            try:
                await post(session, base)
                counts[name][0] += 1
            except Exception as error:  # every failure is counted and reported, none hidden
                counts[name][1] += 1
                failures.append(f"{name}: {type(error).__name__}: {error}")

    old_only = trusting(old_dir, tmp=trust_dir)
    both = trusting(old_dir, new_dir, tmp=trust_dir)
    keepalive = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=old_only, limit=1))
    fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=both, force_close=True))
    try:
        await post(keepalive, base)  # the keep-alive connection exists before the swap
        old_expiry = await expiry_metric(keepalive, base)
        assert old_expiry == old.cert.not_valid_after_utc.timestamp()
        clients = [asyncio.create_task(loop("keepalive", keepalive)), asyncio.create_task(loop("fresh", fresh))]
        await asyncio.sleep(0.2)
        kubelet_volume(cert_dir, new, "v2")
        swapped_at = time.monotonic()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=both, force_close=True)) as probe:
            while await expiry_metric(probe, base) != new.cert.not_valid_after_utc.timestamp():
                assert time.monotonic() - swapped_at < 5, "the new certificate was not loaded"
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # keep the load up after the reload too
        stop.set()
        await asyncio.gather(*clients)

        assert failures == [], failures[:5]
        assert counts["keepalive"][0] > 10 and counts["fresh"][0] > 10, counts

        new_only = trusting(new_dir, tmp=trust_dir)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=new_only, force_close=True)) as client:
            await post(client, base)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=old_only, force_close=True)) as client:
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await post(client, base)
        # the connection opened before the swap still speaks the old certificate, still fine
        await post(keepalive, base)
    finally:
        stop.set()
        await keepalive.close()
        await fresh.close()
        await server.stop()


async def test_a_mismatched_pair_keeps_the_old_one_serving(tmp_path: Path, rules_dir: Path) -> None:
    """A Secret updated with a certificate and a key that do not belong together (a bad paste,
    or a writer that replaced tls.crt before tls.key) must not take the server down: every
    replica reloads the same Secret at once, so a broken reload is a cluster-wide outage."""
    old, new = generate_bundle(*SAN), generate_bundle(*SAN)
    cert_dir, trust_dir = tmp_path / "tls", tmp_path / "trust"
    cert_dir.mkdir()
    trust_dir.mkdir()
    (old_dir := tmp_path / "old").mkdir()
    write_bundle(old, old_dir)
    kubelet_volume(cert_dir, old, "v1")
    server = await start_server(cert_dir, rules_dir)
    base = f"https://localhost:{server.port}"
    old_only = trusting(old_dir, tmp=trust_dir)
    try:
        broken = Bundle(new.ca_cert, new.ca_key, new.cert, old.key)  # new certificate, old key
        kubelet_volume(cert_dir, broken, "v2")
        assert server.state.certs is not None
        deadline = time.monotonic() + 5
        while not server.state.certs.error:
            assert time.monotonic() < deadline, "the broken pair was never tried"
            await asyncio.sleep(0.02)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=old_only, force_close=True)) as client:
            for _ in range(3):
                await post(client, base)  # new handshakes still get the old, consistent pair
            async with client.get(f"{base}/readyz") as response:
                detail = await response.json()
            # still Ready: the old certificate is valid and served; the error is reported, not fatal
            assert response.status == 200 and "cannot load" in detail["certificate"]["error"]
            async with client.get(f"{base}/metrics") as response:
                assert "gpu_webhook_certificate_reload_failures_total 1.0" in await response.text()
    finally:
        await server.stop()


OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
IMAGE = "registry.example.com/gpu-webhook@sha256:" + "0" * 64
SERVICE_NAME = "gpu-webhook.gpu-webhook.svc"  # what `gpu-webhook certs` names by default, as the apiserver dials it


def new_ca_procedure() -> list[str]:
    """The commands of docs/operations.md §5 "New CA", in order, as the doc spells them."""
    text = OPERATIONS.read_text()
    section = text[text.index("**New CA**") :]
    section = section[: section.index("\n\n")]
    return [c for c in re.findall(r"`([^`]+)`", section) if c.startswith(("gpu-webhook ", "mkdir "))]


def run_documented(command: str, cwd: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """One documented command, as an admin would type it: gpu-webhook through main(), the rest with bash.

    The doc's `...` stands for the flags of the install (§3a); --image is the one a fail-closed render needs.
    """
    if not command.startswith("gpu-webhook "):
        subprocess.run(["bash", "-e", "-c", command], cwd=cwd, check=True)
        return ""
    argv = shlex.split(command.replace("...", f"--image {IMAGE}"))[1:]
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, (command, err)
    return out


def ca_bundle(rendered: str) -> bytes:
    """The caBundle the apiserver would trust after applying `rendered` (the same in every webhook entry)."""
    bundles = {
        webhook["clientConfig"]["caBundle"]
        for obj in yaml.safe_load_all(rendered)
        if obj and obj["kind"].endswith("WebhookConfiguration")
        for webhook in obj["webhooks"]
    }
    assert len(bundles) == 1, bundles
    return base64.b64decode(bundles.pop())


def secret_volume(directory: Path, source: Path, version: str) -> None:
    """The Secret of `kubectl create secret tls --cert=SOURCE/tls.crt --key=SOURCE/tls.key`, as the kubelet
    publishes it (kubelet_volume's atomic `..data` swap): tls.crt and tls.key only."""
    data = directory / f"..{version}"
    data.mkdir()
    for name in (CERT_FILE, KEY_FILE):
        shutil.copy(source / name, data / name)
    link = directory / "..data_tmp"
    link.symlink_to(data.name)
    os.replace(link, directory / "..data")
    for name in (CERT_FILE, KEY_FILE):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


async def test_the_documented_new_ca_procedure_fails_no_request(
    tmp_path: Path, rules_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/operations.md §5 "New CA", command by command, against a live server: the caBundle of step 2
    (old and new CA) is what the client trusts, and no request fails while step 3 swaps the Secret."""
    steps = new_ca_procedure()
    assert [s.split()[:2] for s in steps] == [
        ["gpu-webhook", "certs"],
        ["mkdir", "-p"],
        ["gpu-webhook", "manifests"],
        ["gpu-webhook", "manifests"],
    ], steps
    work = tmp_path / "admin"
    work.mkdir()
    monkeypatch.chdir(work)
    run_documented("gpu-webhook certs --out ./old --keep-ca-key", work, capsys)  # the install (§3a)
    cert_dir = tmp_path / "secret"
    cert_dir.mkdir()
    secret_volume(cert_dir, work / "old", "v1")
    server = await start_server(cert_dir, rules_dir)
    base = f"https://127.0.0.1:{server.port}"
    try:
        run_documented(steps[0], work, capsys)  # 1. the new CA and its serving certificate
        run_documented(steps[1], work, capsys)  # 2. both CAs in one file ...
        both_rendered = run_documented(steps[2], work, capsys)  # ... and the caBundle with both
        assert not any(obj and obj["kind"] == "Secret" for obj in yaml.safe_load_all(both_rendered))
        bundle = ca_bundle(both_rendered)
        assert bundle == (work / "old" / CA_FILE).read_bytes() + (work / "new" / CA_FILE).read_bytes()

        (tmp_path / "bundle.pem").write_bytes(bundle)
        apiserver = ssl.create_default_context(cafile=str(tmp_path / "bundle.pem"))  # checks the host name
        counts, failures, stop = [0], [], asyncio.Event()

        async def load() -> None:  # a new connection per request, as handshakes are what a swap can break
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=apiserver, force_close=True)) as s:
                while not stop.is_set():
                    try:
                        await post(s, base, server_hostname=SERVICE_NAME)
                        counts[0] += 1
                    except Exception as error:  # every failure is counted and reported, none hidden
                        failures.append(f"{type(error).__name__}: {error}")

        client = asyncio.create_task(load())
        await asyncio.sleep(0.2)
        secret_volume(cert_dir, work / "new", "v2")  # 3. the Secret now holds the new serving pair
        new_expiry = certificate_not_after(work / "new" / CERT_FILE).timestamp()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=apiserver, force_close=True)) as probe:
            await wait_for(lambda: _expiry_is(probe, base, new_expiry), timeout=5)
        await asyncio.sleep(0.2)  # keep the load up after the reload too
        stop.set()
        await client
        assert failures == [], failures[:5]
        assert counts[0] > 5, counts

        new_rendered = run_documented(steps[3], work, capsys)  # 4. the caBundle with the new CA only
        assert ca_bundle(new_rendered) == (work / "new" / CA_FILE).read_bytes()
        (tmp_path / "new.pem").write_bytes(ca_bundle(new_rendered))
        new_only = ssl.create_default_context(cafile=str(tmp_path / "new.pem"))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=new_only, force_close=True)) as s:
            await post(s, base, server_hostname=SERVICE_NAME)
    finally:
        await server.stop()


async def _expiry_is(session: aiohttp.ClientSession, base: str, expected: float) -> bool:
    return await expiry_metric(session, base, server_hostname=SERVICE_NAME) == expected
