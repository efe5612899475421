"""Faults under load: rule reloads, certificate swaps and a SIGTERM while requests keep coming.

    python -m bench.faults --reloads 100 --cert-swaps 10 --concurrency 16

One `gpu-webhook serve` child, a client loop that never stops sending (half on keep-alive
connections, half on a new TLS connection per request), and meanwhile the rule reloads, the
certificate swaps (certificate first, key 300 ms later) and a SIGTERM with requests in flight
(the harness is tests/support/faults.py). Prints the counts as JSON; exits 1 unless every
request issued got a well-formed 200 answer and the server exited 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from tests.support.faults import run

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reloads", type=int, default=100)
    parser.add_argument("--cert-swaps", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    result = asyncio.run(run(args.reloads, args.cert_swaps, args.concurrency))
    print(json.dumps(result, indent=2))
    sys.exit(0 if not result["failed"] and not result["lost"] and result["server exit code"] == 0 else 1)
