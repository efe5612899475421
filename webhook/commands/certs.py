"""`gpu-webhook certs`: a private CA and a serving certificate for the webhook's Service, or for any name.

Writes ca.crt, tls.crt and tls.key (0600) to --out. The serving certificate names the Service's
DNS names (--service, --namespace) plus every --dns and --ip given; `--no-service-names` leaves
only those, for a webhook reached outside the cluster (a `url` clientConfig) or behind another name. The CA key is written only with
--keep-ca-key; keep it somewhere safe (not in the cluster) and pass --reuse-ca to a later
run to renew the serving certificate under the same CA, so the caBundle in the webhook
configurations never changes. Without it, a renewal is a new CA: re-render the manifests.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from webhook.commands.common import UsageError

# webhook.certs' own, which imports cryptography: the parser needs only these (a test keeps them equal)
CA_FILE, CERT_FILE, KEY_FILE, CA_KEY_FILE = "ca.crt", "tls.crt", "tls.key", "ca.key"
CA_DAYS, SERVING_DAYS = 5 * 365, 365


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "certs",
        help="make a CA and a serving certificate for the webhook Service",
        description="Write ca.crt, tls.crt and tls.key for the webhook Service to --out. An existing CA is never "
        "replaced silently: renew under it with --reuse-ca, or replace it with --force.",
    )
    parser.add_argument("--service", default="gpu-webhook", help="Service name (default gpu-webhook)")
    parser.add_argument("--namespace", default="gpu-webhook", help="Service namespace (default gpu-webhook)")
    parser.add_argument(
        "--dns",
        action="append",
        default=[],
        metavar="NAME",
        help="another DNS name for the serving certificate (repeatable), e.g. a load balancer's or a "
        "`url` clientConfig's host; a leading `*.` makes a wildcard",
    )
    parser.add_argument(
        "--ip",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="an IP address for the serving certificate (repeatable, IPv4 or IPv6), for a `url` clientConfig by address",
    )
    parser.add_argument(
        "--no-service-names",
        action="store_true",
        help="name only --dns and --ip, not the Service's DNS names (a webhook outside the cluster)",
    )
    parser.add_argument("--out", required=True, help="directory to write ca.crt, tls.crt, tls.key to")
    parser.add_argument(
        "--days", type=int, default=SERVING_DAYS, help=f"serving certificate validity (default {SERVING_DAYS})"
    )
    parser.add_argument("--ca-days", type=int, default=CA_DAYS, help=f"CA validity for a new CA (default {CA_DAYS})")
    parser.add_argument("--keep-ca-key", action="store_true", help=f"also write {CA_KEY_FILE}, to sign renewals")
    parser.add_argument(
        "--reuse-ca", action="store_true", help=f"sign with the {CA_FILE}/{CA_KEY_FILE} already in --out (a renewal)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"replace a {CA_FILE} already in --out with a new CA (the caBundle in the cluster then stops matching)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import datetime as dt

    from webhook.certs import Bundle, generate_ca, generate_serving, load_ca, write_bundle

    if args.days < 1 or args.ca_days < 1:
        raise UsageError("--days and --ca-days must be positive")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    if not args.reuse_ca and not args.force and (out / CA_FILE).exists():
        raise UsageError(
            f"{out / CA_FILE} exists: a new CA would no longer match the caBundle of the installed webhooks. "
            f"Renew the serving certificate with --reuse-ca (needs {CA_KEY_FILE}: --keep-ca-key), "
            "or replace the CA with --force and re-render the manifests"
        )
    if args.reuse_ca:
        try:
            ca_cert, ca_key = load_ca(out)
        except (OSError, ValueError) as error:
            raise UsageError(f"--reuse-ca: cannot load the CA from {out}: {error}") from None
        keep_ca_key = True  # it is already there; rewriting it unchanged keeps the directory consistent
    else:
        ca_cert, ca_key = generate_ca(days=args.ca_days)
        keep_ca_key = args.keep_ca_key
    if args.days > args.ca_days and not args.reuse_ca:
        raise UsageError("--days exceeds --ca-days: the serving certificate would outlive its CA")
    names = subject_names(args)
    addresses = ip_addresses(args.ip)
    cert, key = generate_serving(ca_cert, ca_key, names, addresses, days=args.days)
    if args.force and not keep_ca_key and (out / CA_KEY_FILE).exists():
        (out / CA_KEY_FILE).unlink()  # the old CA's key: it would never match the new ca.crt
    try:
        write_bundle(Bundle(ca_cert, ca_key, cert, key), out, write_ca_key=keep_ca_key)
    except OSError as error:
        raise UsageError(f"--out {out}: cannot write: {error.strerror or error}") from None
    left = ca_cert.not_valid_after_utc - dt.datetime.now(dt.UTC)
    print(
        f"wrote {out / CA_FILE}, {out / CERT_FILE}, {out / KEY_FILE}"
        + (f", {out / CA_KEY_FILE}" if keep_ca_key else "")
    )
    print(f"serving certificate for {', '.join([*names, *addresses])}; valid until {cert.not_valid_after_utc:%Y-%m-%d}")
    print(f"CA valid until {ca_cert.not_valid_after_utc:%Y-%m-%d} ({left.days} days)")
    if keep_ca_key:
        print(f"keep {out / CA_KEY_FILE} out of the cluster and out of version control")
    return 0


def subject_names(args: argparse.Namespace) -> list[str]:
    """The DNS names of the serving certificate: the Service's (unless left out), then --dns, each once."""
    from webhook.certs import service_dns_names

    names = [] if args.no_service_names else service_dns_names(args.service, args.namespace)
    for name in args.dns:
        problem = dns_name_problem(name)
        if problem:
            raise UsageError(f"--dns {name!r}: {problem}")
        names.append(name.lower())
    if not names and not args.ip:
        raise UsageError("--no-service-names leaves the certificate without a name: give --dns or --ip")
    return list(dict.fromkeys(names))


def dns_name_problem(name: str) -> str | None:
    """Why NAME cannot be a DNS subjectAltName a TLS client matches (RFC 6125), or None.

    Lower-case letters, digits and hyphens in labels of 1-63 characters, 253 at most in all; a
    wildcard only as the whole left-most label. An IP address belongs in --ip: clients match an
    address against IP SANs only, so as a DNS name it would never verify.
    """
    import ipaddress
    import re

    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        return "an IP address: give it with --ip (clients check addresses against IP SANs only)"
    if not name or len(name) > 253:
        return "a DNS name has 1 to 253 characters"
    labels = name.lower().split(".")
    if labels[0] == "*":
        labels = labels[1:]
        if len(labels) < 2:
            return "a wildcard needs at least two labels after `*.`"
    label = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
    bad = [part for part in labels if not label.fullmatch(part)]
    if bad:
        return f"label {bad[0]!r} is not a DNS label (a-z, 0-9, '-', 1-63 characters, no leading or trailing '-')"
    return None


def ip_addresses(values: list[str]) -> list[str]:
    """--ip values as canonical addresses, each once; a malformed one is a usage error."""
    import ipaddress

    addresses: list[str] = []
    for value in values:
        try:
            addresses.append(str(ipaddress.ip_address(value)))
        except ValueError:
            raise UsageError(f"--ip {value!r}: not an IPv4 or IPv6 address") from None
    return list(dict.fromkeys(addresses))
