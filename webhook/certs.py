"""Certificates for the webhook's TLS: a private CA and a serving certificate signed by it.

ECDSA P-256 keys (small, fast handshakes, accepted by every apiserver). The CA signs
only certificates (keyCertSign, pathlen 0); the serving certificate is for TLS
servers only (digitalSignature, serverAuth) and names whatever DNS names and IP addresses it is
given (the Service's by default, see webhook.commands.certs).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE, CERT_FILE, KEY_FILE, CA_KEY_FILE = "ca.crt", "tls.crt", "tls.key", "ca.key"
# The CA outlives several serving certificates so rotating the serving one never touches
# the caBundle in the webhook configurations; one year of serving validity matches what
# cert-manager and most platforms rotate at, and /metrics exposes the expiry to alert on.
CA_DAYS, SERVING_DAYS = 5 * 365, 365


@dataclass(frozen=True, slots=True)
class Bundle:
    ca_cert: x509.Certificate
    ca_key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the apiserver may use to reach a Service."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def generate_ca(
    common_name: str = "gpu-webhook CA", days: int = CA_DAYS
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def generate_serving(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    dns_names: list[str],
    ip_addresses: list[str] = (),  # type: ignore[assignment]
    days: int = SERVING_DAYS,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns_names or list(ip_addresses))[0])])
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def generate_bundle(dns_names: list[str], ip_addresses: list[str] = ()) -> Bundle:  # type: ignore[assignment]
    ca_cert, ca_key = generate_ca()
    cert, key = generate_serving(ca_cert, ca_key, dns_names, list(ip_addresses))
    return Bundle(ca_cert, ca_key, cert, key)


def write_bundle(bundle: Bundle, directory: str | os.PathLike[str], write_ca_key: bool = False) -> None:
    """Write ca.crt, tls.crt and tls.key (0600). The CA key is kept only when asked (to sign renewals)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    _write(out / CA_FILE, bundle.ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(out / KEY_FILE, _key_pem(bundle.key), 0o600)
    _write(out / CERT_FILE, bundle.cert.public_bytes(serialization.Encoding.PEM), 0o644)
    if write_ca_key:
        _write(out / CA_KEY_FILE, _key_pem(bundle.ca_key), 0o600)


def load_ca(directory: str | os.PathLike[str]) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA kept by an earlier `write_bundle(..., write_ca_key=True)`, to sign a renewal with."""
    out = Path(directory)
    cert = x509.load_pem_x509_certificate((out / CA_FILE).read_bytes())
    key = serialization.load_pem_private_key((out / CA_KEY_FILE).read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise ValueError(f"{out / CA_KEY_FILE} is not the key of {out / CA_FILE}")
    return cert, key


def ensure_dev_certificates(directory: str | os.PathLike[str]) -> bool:
    """Create a throw-away CA and a localhost certificate unless tls.crt and tls.key exist; True if created."""
    out = Path(directory)
    if (out / CERT_FILE).exists() and (out / KEY_FILE).exists():
        return False
    write_bundle(generate_bundle(["localhost"], ["127.0.0.1", "::1"]), out)
    return True


def certificate_not_after(path: str | os.PathLike[str]) -> dt.datetime:
    cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    return cert.not_valid_after_utc


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    """A CA signs certificates and CRLs only; a TLS server's ECDSA key only signs handshakes."""
    return x509.KeyUsage(
        digital_signature=not signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    # write then rename, so a server watching the directory never reads half a file
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(temporary, mode)
    os.replace(temporary, path)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def check_bundle(directory: str | os.PathLike[str], dns_name: str, with_key: bool = True) -> list[str]:
    """What is wrong with DIR/ca.crt, tls.crt (and tls.key) for a webhook reached at `dns_name`; [] if nothing.

    What the apiserver and the server will check later, checked before anything is embedded: every
    certificate of ca.crt parses and is a CA (ca.crt may hold several: the caBundle of a CA
    rotation, old and new), the serving certificate is signed by one of them, names `dns_name` in
    its subjectAltName, is valid now, and (with_key) matches tls.key.

    Without the key (`manifests --no-secret`) only the caBundle is embedded, and the serving pair is
    someone else's Secret: a tls.crt in DIR is still checked, but DIR may hold ca.crt alone (the
    `cat old/ca.crt new/ca.crt > both/ca.crt` step of docs/operations.md §5).
    """
    out = Path(directory)
    problems: list[str] = []
    try:
        cas = x509.load_pem_x509_certificates((out / CA_FILE).read_bytes())
    except (OSError, ValueError) as error:
        return [f"{out / CA_FILE}: not a readable PEM certificate ({getattr(error, 'strerror', None) or error})"]
    for position, ca in enumerate(cas):
        which = f"{out / CA_FILE}" + (f" (certificate {position + 1} of {len(cas)})" if len(cas) > 1 else "")
        try:
            constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
            if not constraints.ca:
                problems.append(f"{which}: not a CA certificate (basicConstraints CA:FALSE)")
        except x509.ExtensionNotFound:
            problems.append(f"{which}: not a CA certificate (no basicConstraints)")
    if not with_key and not (out / CERT_FILE).exists():
        return problems
    try:
        cert = x509.load_pem_x509_certificate((out / CERT_FILE).read_bytes())
    except (OSError, ValueError) as error:
        return [
            *problems,
            f"{out / CERT_FILE}: not a readable PEM certificate ({getattr(error, 'strerror', None) or error})",
        ]
    if not any(_issued_by(cert, ca) for ca in cas):
        problems.append(f"{out / CERT_FILE} is not signed by {out / CA_FILE}: the apiserver would refuse it")
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName
        )
    except x509.ExtensionNotFound:
        names = []
    if dns_name not in names:
        problems.append(f"{out / CERT_FILE} does not name {dns_name} (it names {', '.join(names) or 'nothing'})")
    now = _now()
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        problems.append(
            f"{out / CERT_FILE} is not valid now (valid {cert.not_valid_before_utc:%Y-%m-%d} to "
            f"{cert.not_valid_after_utc:%Y-%m-%d})"
        )
    if with_key:
        try:
            key = serialization.load_pem_private_key((out / KEY_FILE).read_bytes(), password=None)
            if key.public_key() != cert.public_key():
                problems.append(f"{out / KEY_FILE} is not the key of {out / CERT_FILE}")
        except (OSError, ValueError, TypeError) as error:
            problems.append(
                f"{out / KEY_FILE}: not a readable PEM private key ({getattr(error, 'strerror', None) or error})"
            )
    return problems


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
