"""Closed-loop cross-check with wrk (C, one thread): the Python client may be the bottleneck."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("post.lua")
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def available() -> bool:
    return shutil.which("wrk") is not None


def _ms(text: str) -> float:
    found = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not found:
        return float("nan")
    return float(found.group(1)) * _UNITS[found.group(2)]


def run_wrk(
    url: str,
    bodies: list[bytes],
    connections: int = 16,
    duration: float = 10.0,
    threads: int = 1,
    cpus: str | None = None,
) -> dict[str, Any]:
    """Max requests/s over `connections` keep-alive connections; wrk's own latency percentiles."""
    if not url.startswith("https://127.0.0.1"):
        raise ValueError("loopback only")
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl") as handle:
        handle.write(b"\n".join(bodies) + b"\n")
        handle.flush()
        command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency"]
        command += ["-s", str(SCRIPT), url, "--", handle.name]
        if cpus is not None and shutil.which("taskset"):
            command = ["taskset", "-c", cpus, *command]
        output = subprocess.run(command, capture_output=True, text=True, timeout=duration + 30, check=True).stdout
    result: dict[str, Any] = {"mode": "closed-wrk", "connections": connections, "threads": threads}
    found = re.search(r"Requests/sec:\s+([\d.]+)", output)
    result["achieved_rps"] = float(found.group(1)) if found else float("nan")
    for label, key in (("50%", "p50_ms"), ("90%", "p90_ms"), ("99%", "p99_ms")):
        found = re.search(rf"^\s+{re.escape(label)}\s+(\S+)", output, re.MULTILINE)
        result[key] = _ms(found.group(1)) if found else float("nan")
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    socket_errors = re.search(r"Socket errors: (.*)", output)
    result["errors"] = int(errors.group(1)) if errors else 0
    if socket_errors:
        result["socket_errors"] = socket_errors.group(1)
    return result
