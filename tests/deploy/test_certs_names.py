"""`gpu-webhook certs --dns/--ip`: a serving certificate for any name, checked as a TLS client checks it.

The SANs are read back with `cryptography`; then the real server (webhook.server, TLS from the
written directory) is reached over a real handshake by each name and address the certificate
names, with host-name checking on (as the apiserver does for a `url` or `service` clientConfig),
and refused by a name it does not carry.
"""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from tests.support.server import client_ssl, start_server
from webhook.cli import main


def sans(path: Path) -> tuple[list[str], list[str]]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return names.get_values_for_type(x509.DNSName), [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]


def test_dns_and_ip_are_added_to_the_service_names(tmp_path: Path) -> None:
    argv = ["certs", "--out", str(tmp_path), "--dns", "webhook.example.com", "--dns", "*.gw.example.com"]
    assert main([*argv, "--ip", "10.0.0.7", "--ip", "fd00::7", "--ip", "10.0.0.7"]) == 0
    dns, ips = sans(tmp_path / "tls.crt")
    assert dns == [
        "gpu-webhook",
        "gpu-webhook.gpu-webhook",
        "gpu-webhook.gpu-webhook.svc",
        "gpu-webhook.gpu-webhook.svc.cluster.local",
        "webhook.example.com",
        "*.gw.example.com",
    ]
    assert ips == ["10.0.0.7", "fd00::7"]  # each once


def test_no_service_names_leaves_only_the_given_ones(tmp_path: Path) -> None:
    assert main(["certs", "--out", str(tmp_path), "--no-service-names", "--ip", "192.0.2.10"]) == 0
    assert sans(tmp_path / "tls.crt") == ([], ["192.0.2.10"])
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert ipaddress.ip_address(cert.subject.rfc4514_string().removeprefix("CN=")) == ipaddress.ip_address("192.0.2.10")


@pytest.mark.parametrize(
    "argv",
    [
        ["--dns", "127.0.0.1"],  # an address given as a DNS name would never verify
        ["--dns=-bad.example.com"],
        ["--dns", "a..b"],
        ["--dns", "*"],
        ["--dns", "x" * 64 + ".example.com"],
        ["--ip", "10.0.0.256"],
        ["--ip", "localhost"],
        ["--no-service-names"],  # no name at all
    ],
)
def test_a_name_no_client_could_match_is_a_usage_error(tmp_path: Path, argv: list[str], capsys) -> None:
    assert main(["certs", "--out", str(tmp_path), *argv]) == 2
    assert "--" in capsys.readouterr().err
    assert not (tmp_path / "tls.crt").exists()  # nothing written


def test_renewal_under_the_same_ca_keeps_the_extra_names(tmp_path: Path) -> None:
    """docs/operations.md's rotation: `--reuse-ca` with the same --dns/--ip gives a new certificate, same CA."""
    names = ["--dns", "webhook.example.com", "--ip", "10.0.0.7"]
    assert main(["certs", "--out", str(tmp_path), "--keep-ca-key", *names]) == 0
    ca, before = (tmp_path / "ca.crt").read_bytes(), (tmp_path / "tls.crt").read_bytes()
    assert main(["certs", "--out", str(tmp_path), "--reuse-ca", *names]) == 0
    assert (tmp_path / "ca.crt").read_bytes() == ca and (tmp_path / "tls.crt").read_bytes() != before
    assert "webhook.example.com" in sans(tmp_path / "tls.crt")[0] and sans(tmp_path / "tls.crt")[1] == ["10.0.0.7"]


async def handshake(port: int, cert_dir: Path, server_hostname: str) -> int:
    """GET /healthz at 127.0.0.1:port, verifying the certificate for `server_hostname` (SNI and name check)."""
    context = client_ssl(cert_dir)
    connector = aiohttp.TCPConnector(ssl=context)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(f"https://127.0.0.1:{port}/healthz", server_hostname=server_hostname, ssl=context) as response,
    ):
        return response.status


async def test_the_server_is_reached_by_each_name_and_address(tmp_path: Path, rules_dir: Path) -> None:
    certs = tmp_path / "certs"
    argv = ["certs", "--out", str(certs), "--no-service-names", "--dns", "webhook.example.test"]
    assert main([*argv, "--dns", "*.lb.example.test", "--ip", "127.0.0.1"]) == 0
    server = await start_server(certs, rules_dir)
    try:
        for name in ("webhook.example.test", "a.lb.example.test", "127.0.0.1"):
            assert await handshake(server.port, certs, name) == 200, name
        for name in ("gpu-webhook.gpu-webhook.svc", "b.a.lb.example.test", "localhost"):
            with pytest.raises(aiohttp.ClientConnectorCertificateError) as refused:
                await handshake(server.port, certs, name)
            assert isinstance(refused.value.certificate_error, ssl.SSLCertVerificationError), name
    finally:
        await server.stop()
