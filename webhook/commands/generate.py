"""The derived files of a checkout, regenerated from what they come from (not a `gpu-webhook` verb).

    python -m webhook.commands.generate crds > manifests/base/crds.yaml
    python -m webhook.commands.generate registration > manifests/base/webhooks.yaml
    python -m webhook.commands.generate helm [CHART_DIR]   # default manifests/helm/gpu-webhook

webhook/install renders each of them (crds.py, registration.py, helm.py); this module only picks
the inputs (the checkout's rules and manifests) and writes the output. tests/deploy and tests/helm
fail when a committed file is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook.commands.common import default_manifests_dir, default_rules_dir, load_ruleset

CHECKOUT_RULES = Path(__file__).resolve().parents[2] / "rules"  # run in a checkout: rules/ beside webhook/


def crds() -> int:
    from webhook.install.crds import base_yaml

    sys.stdout.write(base_yaml())
    return 0


def registration() -> int:
    """manifests/base/webhooks.yaml for the shipped pack."""
    from webhook.install.registration import base_yaml

    sys.stdout.write(base_yaml(load_ruleset(str(CHECKOUT_RULES))))
    return 0


def helm(chart: Path | None) -> int:
    from webhook.install.helm import DEFAULT_CHART, chart_files, write

    rules = default_rules_dir()
    load_ruleset(rules)  # a broken pack is never shipped in the chart's rules ConfigMap
    chart = chart or DEFAULT_CHART
    written = write(chart, chart_files(Path(default_manifests_dir()), rules))
    print(f"wrote {len(written)} files under {chart}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webhook.commands.generate", description=__doc__.splitlines()[0])
    files = parser.add_subparsers(dest="file", required=True)
    files.add_parser("crds", help="print manifests/base/crds.yaml")
    files.add_parser("registration", help="print manifests/base/webhooks.yaml")
    chart = files.add_parser("helm", help="write the Helm chart's generated files")
    chart.add_argument("chart", nargs="?", type=Path, help="the chart's directory")
    args = parser.parse_args(argv)
    if args.file == "crds":
        return crds()
    if args.file == "registration":
        return registration()
    return helm(args.chart)


if __name__ == "__main__":
    raise SystemExit(main())
