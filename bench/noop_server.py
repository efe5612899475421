"""The floor: a no-op admission webhook on the same stack (aiohttp + TLS + orjson).

It parses the body (as any webhook must, to echo the uid) and answers allowed. Whatever
gpu-webhook costs beyond this is our own work. `--workers N` forks N processes on one
port with SO_REUSEPORT, like `gpu-webhook serve --workers N`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

import orjson
from aiohttp import web

from webhook.server import tls_context


async def admit(request: web.Request) -> web.Response:
    review = orjson.loads(await request.read())
    uid = review["request"]["uid"]
    answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": True}}
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


async def serve(host: str, port: int, cert_dir: str, reuse_port: bool) -> None:
    app = web.Application(client_max_size=3 * 1024 * 1024)
    app.router.add_post("/mutate", admit)
    app.router.add_post("/validate", admit)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=tls_context(cert_dir), reuse_port=reuse_port or None).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--loop", choices=["asyncio", "uvloop", "auto"], default="asyncio")
    args = parser.parse_args()
    runner = asyncio.run
    if args.loop != "asyncio":
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            if args.loop == "uvloop":
                raise
    if args.workers == 1:
        runner(serve(args.host, args.port, args.cert_dir, False))
        return 0
    children = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            runner(serve(args.host, args.port, args.cert_dir, True))
            os._exit(0)
        children.append(pid)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for child in children:
        os.waitpid(child, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
