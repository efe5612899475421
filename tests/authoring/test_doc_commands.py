"""Every command block (```sh) of the README and the docs runs as written, where it needs no cluster.

Commands run with bash in a scratch directory holding copies of examples/, rules/ and manifests/ (so
files they write stay out of the checkout), with `.venv` pointing at the test environment.
Skipped, and only these: commands that need a cluster (kubectl, helm, --cluster), that install
software (venv, pip, apt-get), run the minutes-long benchmark, or check the checkout itself (pytest,
mypy: this suite and its type check, not a user's command), and synopses with [options].
A `| kubectl apply -f -` tail is dropped: what gpu-webhook prints is still checked.
The README's curl examples run against `gpu-webhook serve` started as the README says.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.authoring.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^( *)```sh\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
NEEDS_MORE = re.compile(r"\bkubectl\b|\bhelm (install|upgrade)\b|--cluster|\bpip\b|\bapt-get\b|python3 -m venv|bench\.run|\bpytest\b|\bmypy\b|activate|\[-|\[--")


def commands(doc: Path) -> list[str]:
    found = []
    for indent, body in BLOCK.findall(doc.read_text()):
        text = re.sub(r"\\\n\s*", " ", "\n".join(line[len(indent) :] for line in body.splitlines()))
        for line in text.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()  # trailing comments
            if line and not line.startswith("#"):
                found.append(line)
    return found


def runnable(command: str) -> str | None:
    command = re.sub(r"\s*\|\s*kubectl apply -f -$", "", command)
    if NEEDS_MORE.search(command) or " serve" in command:
        return None
    return command


def all_commands() -> list[tuple[str, str]]:
    return [(doc.name, c) for doc in DOCS for c in commands(doc)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("doc-commands")
    shutil.copytree(REPO / "examples", work / "examples")
    shutil.copytree(REPO / "rules", work / "rules")
    shutil.copytree(REPO / "manifests", work / "manifests")
    shutil.copy(REPO / "examples" / "pod-notebook.yaml", work / "pod.yaml")
    (work / ".venv").symlink_to(Path(sys.prefix))
    return work


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env.pop("GPU_WEBHOOK_RULES", None)
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_docs_have_commands_to_run():
    runnable_ones = [c for _, c in all_commands() if runnable(c) and not c.startswith("curl")]
    assert len(runnable_ones) >= 10, runnable_ones


def test_every_command_block_runs(workdir: Path):
    for doc, command in all_commands():
        command = runnable(command)  # type: ignore[assignment]
        if command is None or command.startswith("curl"):
            continue
        result = shell(command, workdir)
        assert "Traceback" not in result.stderr, (doc, command, result.stderr)
        # 1 is an answer (audit found denials, explain was denied); 2 would be a usage error in the doc
        assert result.returncode in (0, 1), (doc, command, result.returncode, result.stderr[-2000:])


def test_the_readme_curl_examples_answer_as_shown(workdir: Path):
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8443)) == 0:
            pytest.skip("port 8443 (the README's) is in use on this machine")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "gpu-webhook"), "serve"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while shell("curl -s --cacert certs/ca.crt https://localhost:8443/healthz", workdir).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
        readme = (REPO / "README.md").read_text()
        curls = [c for c in commands(REPO / "README.md") if c.startswith("curl")]
        assert len(curls) == 2
        mutate = shell(curls[0], workdir)
        assert mutate.returncode == 0, mutate.stderr
        assert mutate.stdout.splitlines()[0] in readme  # "<uid> True", as the README shows
        assert '"path": "/spec/tolerations"' in mutate.stdout
        validate = shell(curls[1], workdir)
        assert validate.returncode == 0 and '"code": 403' in validate.stdout, validate.stdout
        for rule in re.findall(r"\[([a-z-]+)\] pod greedy", readme):
            assert f"[{rule}]" in validate.stdout, rule
    finally:
        server.terminate()
        server.wait(timeout=20)
