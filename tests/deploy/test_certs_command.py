"""`gpu-webhook certs`: the Service's DNS names as SANs, server-only usages, and renewals that
keep the CA (so the caBundle in the webhook configurations does not change)."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook.cli import main


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_serving_certificate_for_the_service(tmp_path: Path) -> None:
    assert main(["certs", "--service", "gw", "--namespace", "ops", "--out", str(tmp_path), "--days", "90"]) == 0
    cert, ca = load(tmp_path / "tls.crt"), load(tmp_path / "ca.crt")
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names == ["gw", "gw.ops", "gw.ops.svc", "gw.ops.svc.cluster.local"]
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH]
    )
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.issuer == ca.subject
    assert 89 <= (cert.not_valid_after_utc - cert.not_valid_before_utc).days <= 91
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "ca.key").exists()  # the CA key only on request


def test_renewal_reuses_the_ca(tmp_path: Path) -> None:
    assert main(["certs", "--out", str(tmp_path), "--keep-ca-key"]) == 0
    ca_before, cert_before = (tmp_path / "ca.crt").read_bytes(), (tmp_path / "tls.crt").read_bytes()
    assert main(["certs", "--out", str(tmp_path), "--reuse-ca"]) == 0
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    assert (tmp_path / "tls.crt").read_bytes() != cert_before
    ca = load(tmp_path / "ca.crt")
    load(tmp_path / "tls.crt").verify_directly_issued_by(ca)


def test_reuse_without_a_ca_key_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["certs", "--out", str(tmp_path)]) == 0
    assert main(["certs", "--out", str(tmp_path), "--reuse-ca"]) == 2
    assert main(["certs", "--out", str(tmp_path), "--days", "0"]) == 2
