"""TLS and access: old protocols and weak suites refused, client certificates checked, plain port limited."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support import RULES, client_ssl, cpu_pod, free_port, make_review, start_server
from webhook.certs import CERT_FILE, KEY_FILE, generate_ca
from webhook.server import tls_context

OLD_PROTOCOLS = [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1]
# TLS 1.2 suites without forward secrecy or without AEAD, all of which OpenSSL still knows.
WEAK_SUITES = ["ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA384", "AES128-GCM-SHA256", "AES128-SHA"]
MODERN_SUITES = ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"]


def legacy_client(version: ssl.TLSVersion | None = None, ciphers: str = "ALL:@SECLEVEL=0") -> ssl.SSLContext:
    """A client willing to speak what our server must refuse; @SECLEVEL=0 lets OpenSSL offer TLS 1.0/1.1."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_ciphers(ciphers)
    if version is not None:
        context.minimum_version = context.maximum_version = version
    return context


async def handshake(port: int, context: ssl.SSLContext) -> str:
    """The negotiated protocol and suite, or the handshake error."""
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost"), 5
        )
    except (ssl.SSLError, ConnectionError) as error:
        return f"refused: {type(error).__name__}: {error}"
    transport_ssl = writer.get_extra_info("ssl_object")
    result = f"{transport_ssl.version()} {transport_ssl.cipher()[0]}"
    writer.transport.abort()
    return result


async def permissive_control_server(cert_dir: Path) -> tuple[asyncio.Server, int]:
    """A server that does accept TLS 1.0: proves the legacy client really offers it here."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.set_ciphers("ALL:@SECLEVEL=0")
    context.load_cert_chain(cert_dir / CERT_FILE, cert_dir / KEY_FILE)
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")  # deprecated is the point
@pytest.mark.filterwarnings("ignore:ssl.PROTOCOL_TLS:DeprecationWarning")
@pytest.mark.parametrize("version", OLD_PROTOCOLS, ids=["TLSv1.0", "TLSv1.1"])
async def test_tls_1_0_and_1_1_handshakes_are_refused_by_the_server(cert_dir: Path, version: ssl.TLSVersion) -> None:
    control, control_port = await permissive_control_server(cert_dir)
    try:
        accepted = await handshake(control_port, legacy_client(version))
    finally:
        control.close()
    if accepted.startswith("refused"):
        pytest.skip(f"this OpenSSL cannot speak {version.name} even at SECLEVEL=0: {accepted}")
    assert accepted.startswith(("TLSv1 ", "TLSv1.1 "))  # the client does offer it...
    server = await start_server(cert_dir, RULES)
    try:
        outcome = await handshake(server.port, legacy_client(version))
    finally:
        await server.stop()
    assert outcome.startswith("refused"), outcome  # ...and our server says no


async def test_only_forward_secret_aead_suites_for_tls_1_2(cert_dir: Path) -> None:
    offered = [c for c in tls_context(str(cert_dir)).get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert offered
    for cipher in offered:
        assert cipher["kea"] == "kx-ecdhe" and cipher["aead"], cipher["name"]
    server = await start_server(cert_dir, RULES)
    try:
        for suite in WEAK_SUITES:
            outcome = await handshake(server.port, legacy_client(ssl.TLSVersion.TLSv1_2, f"{suite}:@SECLEVEL=0"))
            assert outcome.startswith("refused"), f"{suite}: {outcome}"
        for suite in MODERN_SUITES:
            assert await handshake(server.port, legacy_client(ssl.TLSVersion.TLSv1_2, suite)) == f"TLSv1.2 {suite}"
    finally:
        await server.stop()


def client_certificate(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA and a client certificate (clientAuth) signed by it, written as PEM files."""
    ca_cert, ca_key = generate_ca(f"{name} CA")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}-apiserver")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / f"{name}-ca.crt", directory / f"{name}.crt", directory / f"{name}.key"
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    paths[2].write_bytes(key_pem)
    return paths


async def post_with(cert_dir: Path, port: int, client: tuple[Path, Path] | None) -> str:
    context = client_ssl(cert_dir)
    if client is not None:
        context.load_cert_chain(*client)
    try:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
            session.post(f"https://localhost:{port}/validate", json=make_review(cpu_pod())) as response,
        ):
            return str(response.status)
    except (aiohttp.ClientError, ssl.SSLError, ConnectionError) as error:
        return f"refused: {type(error).__name__}"


async def test_client_certificates_from_the_configured_ca_only(cert_dir: Path, tmp_path: Path) -> None:
    apiserver_ca, apiserver_cert, apiserver_key = client_certificate(tmp_path, "apiserver")
    _, stranger_cert, stranger_key = client_certificate(tmp_path, "stranger")
    server = await start_server(cert_dir, RULES, client_ca=str(apiserver_ca))
    try:
        assert await post_with(cert_dir, server.port, (apiserver_cert, apiserver_key)) == "200"
        assert (await post_with(cert_dir, server.port, None)).startswith("refused")
        assert (await post_with(cert_dir, server.port, (stranger_cert, stranger_key))).startswith("refused")
    finally:
        await server.stop()


async def test_plain_metrics_port_serves_metrics_and_health_but_never_admission(cert_dir: Path) -> None:
    port = free_port()
    server = await start_server(cert_dir, RULES, metrics_host="127.0.0.1", metrics_port=port)
    try:
        async with aiohttp.ClientSession() as session:
            for path in ("/metrics", "/healthz", "/readyz"):
                async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                    assert response.status == 200, path
            for endpoint in ("/mutate", "/validate"):
                async with session.post(f"http://127.0.0.1:{port}{endpoint}", json=make_review(cpu_pod())) as response:
                    assert response.status == 404, endpoint
        # and the TLS port still answers admission
        assert await post_with(cert_dir, server.port, None) == "200"
    finally:
        await server.stop()
