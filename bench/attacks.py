"""Three tenant attacks on one `gpu-webhook serve` while a legitimate client sends GPU pods.

One server with the default pack; a legitimate client sends compliant GPU-pod reviews at
50 req/s throughout; the attacks come one after the other (the harness, and what each attack
does, is tests/support/attacks.py):

1. 20,000 reviews with random `request.kind.kind`, then /metrics: its size and scrape time.
2. 2,000 idle TLS + 1,000 silent TCP connections held 10 s: the legitimate client's p99 and
   failures, the server's peak memory (PSS of the server and its evaluation process).
3. 8 senders of 2.9 MiB pods for 10 s: the legitimate client's p99 and max.

Prints the figures as JSON with `targets_met`; exits 1 if a target is missed.

    python -m bench.attacks                                   # this checkout's server
    python -m bench.attacks --server OTHER/.venv/bin/gpu-webhook --rules OTHER/rules
    python -m bench.attacks --short                           # the CI test's sizes
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import orjson

from tests.support.attacks import SHORT, Sizes, run

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--server", default=str(Path(sys.executable).with_name("gpu-webhook")), help="gpu-webhook executable"
    )
    parser.add_argument("--rules", default=str(REPO / "rules"))
    parser.add_argument("--short", action="store_true", help="the CI test's sizes")
    parser.add_argument("--random-kinds", type=int)
    parser.add_argument("--hold", type=float, help="seconds the connections are held")
    parser.add_argument("--heavy", type=float, help="seconds the heavy senders send")
    parser.add_argument("--json", help="write the report here too")
    parser.add_argument("server_args", nargs="*", help="after --: more arguments for `serve`")
    args = parser.parse_args()
    sizes = dataclasses.replace(SHORT if args.short else Sizes())  # the shared SHORT stays as the test reads it
    if args.random_kinds is not None:
        sizes.random_kinds = args.random_kinds
    if args.hold is not None:
        sizes.hold_seconds = args.hold
    if args.heavy is not None:
        sizes.heavy_seconds = args.heavy
    report = run([args.server], args.rules, sizes, args.server_args)
    result = {"server": report.server, "sizes": vars(sizes), **report.phases, "targets_met": report.verdicts()}
    text = orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0 if all(report.verdicts().values()) else 1


if __name__ == "__main__":
    sys.exit(main())
