"""The server's child processes never outlive it: a server that dies without its clean-up (SIGKILL,
the OOM killer, a crash) leaves neither its /policies check process (webhook/policies/checker.py)
nor its offload worker (webhook/server/offload.py) behind.

Both are forked with both ends of their pipes. The check process learns that the server is gone
from the end of file on its own end, which comes only once no process holds the server's end: it
closes its inherited copy. The offload worker waits on the pool's queue, whose pipe
ProcessPoolExecutor leaves open in it: it watches its parent instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

CHECKER = textwrap.dedent(
    """
    import asyncio, os
    from webhook.policies.checker import Checker

    checker = Checker()
    assert asyncio.run(checker.run(os.getpid, (), 10.0)) != os.getpid()
    print(checker._process.pid, flush=True)
    os._exit(0)  # no clean-up: as SIGKILL or a crash leaves it
    """
)
OFFLOAD = textwrap.dedent(
    """
    import os
    from webhook.server.offload import Offload

    pool = Offload()._executor(None, 0)  # the pool as the server makes it (the rule set is not used here)
    print(pool.submit(os.getpid).result(), flush=True)
    os._exit(0)
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[1][0] != "Z"  # a zombie is gone, only not reaped yet


@pytest.mark.parametrize("script", [CHECKER, OFFLOAD], ids=["policy-check", "offload"])
def test_a_server_that_dies_without_clean_up_leaves_no_child_behind(script: str) -> None:
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    child = int(server.stdout.readline())
    assert server.wait(30) == 0
    server.stdout.close()
    deadline = time.monotonic() + 10
    while alive(child):
        if time.monotonic() > deadline:
            os.kill(child, 9)
            raise AssertionError(f"child process {child} outlived its server")
        time.sleep(0.05)
