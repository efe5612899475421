"""The floor: a no-op admission webhook on the same stack (aiohttp + TLS + orjson).

It parses the body (as any webhook must, to echo the uid) and answers allowed. Whatever
gpu-webhook costs beyond this is our own work. With `--patch-file` (JSON: object name -> a
JSONPatch) /mutate answers an object of that name with that patch, precomputed: what applying
gpu-webhook's patch costs the apiserver, without gpu-webhook's evaluation (bench.apiserver_path). `--workers N` forks N processes on one
port with SO_REUSEPORT, like `gpu-webhook serve --workers N`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import signal
import sys
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from webhook.server import tls_context


async def admit(request: web.Request) -> web.Response:
    review = orjson.loads(await request.read())
    uid = review["request"]["uid"]
    answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": True}}
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


def patching(patches: dict[str, str]) -> Any:
    """/mutate answering each named object with its precomputed patch (base64 JSONPatch)."""

    async def admit_with_patch(request: web.Request) -> web.Response:
        review = orjson.loads(await request.read())
        uid = review["request"]["uid"]
        response: dict[str, Any] = {"uid": uid, "allowed": True}
        patch = patches.get(((review["request"].get("object") or {}).get("metadata") or {}).get("name", ""))
        if patch:
            response.update(patchType="JSONPatch", patch=patch)
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    return admit_with_patch


async def serve(host: str, port: int, cert_dir: str, reuse_port: bool, patch_file: str | None = None) -> None:
    app = web.Application(client_max_size=3 * 1024 * 1024)
    patches = {}
    if patch_file:
        patches = {
            name: base64.b64encode(orjson.dumps(patch)).decode()
            for name, patch in orjson.loads(Path(patch_file).read_bytes()).items()
        }
    app.router.add_post("/mutate", patching(patches) if patches else admit)
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
    parser.add_argument("--patch-file", help="JSON: object name -> the JSONPatch /mutate answers it with")
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
        runner(serve(args.host, args.port, args.cert_dir, False, args.patch_file))
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
