"""`gpu-webhook manifests`: the install manifests as one multi-document YAML stream.

webhook/install/manifests.py renders them (the overlay, the rules ConfigMap, the caBundle and the
TLS Secret); this command resolves the options, loads the rules first (a broken pack is never
shipped; one line on stderr says which rules) and, with --native, exports the rules that run in the
apiserver instead. A RenderError is a usage error (exit code 2).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from webhook.commands.common import (
    CLAIMS_MODES,
    CLAIMS_REFUSE,
    DEFAULT_KUBERNETES_VERSION,
    UsageError,
    add_rules,
    default_manifests_dir,
    default_rules_dir,
    load_ruleset,
    rule_paths,
    warn,
)

if TYPE_CHECKING:
    from webhook.export.versions import Release


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("manifests", help="render the install manifests (multi-document YAML)")
    parser.add_argument("--overlay", choices=["audit", "enforce"], default="enforce", help="roll-out step")
    parser.add_argument(
        "--component",
        action="append",
        default=[],
        choices=["cert-manager", "policyreports", "audit-cronjob", "api-fairness", "monitoring"],
        help="add a component (repeatable): cert-manager issues the certificate; policyreports lets the server "
        "write PolicyReports; audit-cronjob runs `audit --cluster -o policyreport --apply` every hour; api-fairness "
        "queues writes of the policy objects in an API priority level of their own (docs/day-two.md); monitoring "
        "adds the Prometheus Operator's ServiceMonitor and PrometheusRule (docs/operations.md §8)",
    )
    parser.add_argument("--ca", help="directory with ca.crt (and tls.crt/tls.key) from `gpu-webhook certs`")
    parser.add_argument("--no-secret", action="store_true", help="do not emit the TLS Secret")
    add_rules(parser)
    parser.add_argument(
        "--image",
        metavar="IMAGE",
        help="the image you pushed, e.g. REGISTRY/gpu-webhook@sha256:... (required with failurePolicy Fail: "
        "the base's image is a placeholder)",
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="mixed mode: rules that export in full run in the apiserver as admission policies (added to the "
        "output) and are left out of the webhook's rules ConfigMap, so each rule runs in exactly one place",
    )
    parser.add_argument(
        "--kubernetes-version",
        metavar="X.Y",
        default=DEFAULT_KUBERNETES_VERSION,
        help="with --native: the cluster's release",
    )
    parser.add_argument(
        "--claims", choices=CLAIMS_MODES, default=CLAIMS_REFUSE, help="with --native: as `gpu-webhook export --claims`"
    )
    parser.add_argument(
        "--policy-per-rule", action="store_true", help="with --native: as `gpu-webhook export --policy-per-rule`"
    )
    parser.add_argument(
        "--runbook",
        action="store_true",
        help="print the outage runbook instead: the kubectl patches that set every webhook entry to Ignore, "
        "and back to Fail (docs/operations.md §6)",
    )
    parser.add_argument("--manifests", default=default_manifests_dir(), help=argparse.SUPPRESS)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from webhook.kubeyaml import styles

    if args.runbook:
        from webhook.install.runbook import runbook

        sys.stdout.write(runbook())
        return 0

    documents = render(
        manifests=Path(args.manifests),
        overlay=args.overlay,
        components=args.component,
        ca_dir=Path(args.ca) if args.ca else None,
        rules=rule_paths(args.rules, args.site),
        image=args.image,
        secret=not args.no_secret,
        native=native_mode(args.kubernetes_version, args.claims, args.policy_per_rule) if args.native else None,
    )
    if not args.image:
        _check_placeholder_image(documents)
    styles.MANIFESTS.write_all(documents, sys.stdout)
    return 0


def _check_placeholder_image(documents: list[dict[str, Any]]) -> None:
    """Without --image the Deployment keeps the base's placeholder image, which no registry serves.

    No replica would ever answer; under failurePolicy Fail the apiserver then refuses every
    pod create the webhooks select (all but the exempt namespaces), so that output is refused.
    Under Ignore nothing is refused and the output is useful to look at: a note says so.
    """
    from webhook.install.manifests import WEBHOOK_KINDS

    images = [
        container["image"]
        for obj in documents
        if obj["kind"] == "Deployment"
        for container in obj["spec"]["template"]["spec"]["containers"]
    ]
    if not images:
        return
    fail_closed = [
        obj["metadata"]["name"]
        for obj in documents
        if obj["kind"] in WEBHOOK_KINDS and any(w.get("failurePolicy") == "Fail" for w in obj["webhooks"])
    ]
    if fail_closed:
        raise UsageError(
            f"refusing to render webhooks that fail closed (failurePolicy: Fail in {', '.join(fail_closed)}) "
            f"with the placeholder image {images[0]}: it cannot be pulled, no replica would answer, and the "
            "apiserver would refuse every pod create outside the exempt namespaces. Give the image you pushed "
            "with --image REGISTRY/gpu-webhook@sha256:..., or try it out first with --overlay audit "
            "(failurePolicy: Ignore)"
        )
    warn(
        f"note: the image {images[0]} is a placeholder: the webhook cannot start (with failurePolicy Ignore "
        "nothing is refused meanwhile); give --image REGISTRY/gpu-webhook@sha256:... to run it"
    )


def render(
    manifests: Path,
    overlay: str = "enforce",
    components: list[str] = (),  # type: ignore[assignment]
    ca_dir: Path | None = None,
    rules: list[str] | str | None = None,
    image: str | None = None,
    secret: bool = True,
    native: NativeMode | None = None,
) -> list[dict[str, Any]]:
    """The install's objects (webhook.install.manifests.render) with the rules loaded as every command loads them."""
    from webhook.install.manifests import RenderError
    from webhook.install.manifests import render as render_install

    paths = [rules] if isinstance(rules, str) else list(rules or [default_rules_dir()])
    exported = partial(native_policies, rules=paths, mode=native, audit=overlay == "audit") if native else None
    try:
        return render_install(
            manifests, overlay, components, ca_dir, paths, image, secret, native=exported, check_rules=load_ruleset
        )
    except RenderError as error:
        raise UsageError(str(error)) from None


class NativeMode(NamedTuple):  # not a dataclass: `dataclasses` is 8 ms of imports that --help would pay
    release: Release
    claims: str
    policy_per_rule: bool = False


def native_mode(version: str, claims: str, policy_per_rule: bool = False) -> NativeMode:
    from webhook.export.versions import Release

    try:
        return NativeMode(Release.parse(version), claims, policy_per_rule)
    except ValueError as error:
        raise UsageError(f"--kubernetes-version: {error}") from None


def native_policies(
    configmap: dict[str, Any], rules: list[str] | str, mode: NativeMode, audit: bool = False
) -> list[dict[str, Any]]:
    """The policies of the rules that export in full; their documents leave the ConfigMap.

    A rule exported narrower than it is (e.g. CREATE only) stays with the webhook and is not
    exported at all, so no rule runs in both places; nor is a rule GPUPolicyExceptions may lift
    (webhook.export.EXCEPTABLE: a warning names those that would export). With `audit` (the audit overlay, whose webhook
    runs `--mode=audit` and refuses nothing) the bindings record instead of denying, as the webhook
    does: validationActions Deny becomes Audit, so the roll-out step blocks nothing in either place.
    """
    from webhook.export import export, native_objects
    from webhook.export.mixed import webhook_files

    try:
        # the render has loaded and announced these rules (check_rules: common.load_ruleset): once is enough
        result = export(load_ruleset(rules, announce=False), "all", mode.release, mode.claims)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if result.lifted:
        from webhook.commands.export import lifted_warning

        warn(f"--native: warning: {lifted_warning(result.lifted)}")
    complete = [rule for rule in result.rules if rule.note is None]
    configmap["data"] = webhook_files(configmap["data"], [rule.rule for rule in complete])
    if audit:
        for rule in complete:
            for obj in rule.objects:
                if obj["kind"] == "ValidatingAdmissionPolicyBinding":
                    actions = obj["spec"]["validationActions"]
                    obj["spec"]["validationActions"] = list(
                        dict.fromkeys("Audit" if a == "Deny" else a for a in actions)
                    )
    return native_objects(complete, mode.policy_per_rule)
