"""`gpu-webhook schema [--out DIR]`: the JSON Schemas of rule, test, site configuration, overlay and exception files, for editors."""

from __future__ import annotations

import argparse
import os
from typing import Any

from webhook.commands.common import EXIT_OK, UsageError

# the keys of webhook.authoring.schemas.FILES, in its order (that module imports the engine's schemas)
KINDS = ("GPUPolicy", "GPUPolicyTest", "GPUWebhookConfig", "GPUPolicyOverlay", "GPUPolicyException")


def register(commands: Any) -> None:
    # every kind named, from KINDS: a fourth schema cannot be left out of the help
    parser = commands.add_parser("schema", help=f"write the JSON Schemas of {', '.join(KINDS[:-1])} and {KINDS[-1]}")
    parser.add_argument("--out", metavar="DIR", help="write every schema file to DIR (default: print one)")
    parser.add_argument("--kind", choices=KINDS, default="GPUPolicy", help="the schema to print")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from webhook.authoring.schemas import render, write

    if args.out:
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise UsageError(f"--out {args.out}: exists and is not a directory (it receives one file per schema)")
        try:
            written = write(args.out)
        except OSError as error:
            raise UsageError(f"--out {args.out}: cannot write: {error.strerror or error}") from None
        for path in written:
            print(path)
    else:
        print(render(args.kind), end="")
    return EXIT_OK
