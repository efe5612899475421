"""The Dockerfile, without a Docker engine: hadolint's checks, then what its parsed instructions
must agree with (the files the build copies, the deployment's user, the CLI the entrypoint runs;
the entrypoint's flags are parsed by the real CLI in test_webhook_configuration.py)."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO

DOCKERFILE = REPO / "Dockerfile"
# the test extra installs it into the virtualenv, which need not be on PATH
HADOLINT = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = DOCKERFILE.read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            result.append([])
        result[-1].append(instruction)
    return result


def dockerfile_entrypoint() -> list[str]:
    entrypoints = [args for word, args in stages()[-1] if word == "ENTRYPOINT"]
    assert len(entrypoints) == 1
    return json.loads(entrypoints[0])  # exec form: no shell involved


@pytest.mark.skipif(HADOLINT is None, reason="hadolint is not installed (pip install -e '.[test]' brings it)")
def test_hadolint_finds_nothing() -> None:
    """hadolint's rules (and ShellCheck's on the RUN lines); its one skip is in .hadolint.yaml."""
    assert HADOLINT is not None
    result = subprocess.run(
        [HADOLINT, "--config", str(REPO / ".hadolint.yaml"), "--format", "json", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0 and json.loads(result.stdout) == [], result.stdout + result.stderr


def test_every_copied_path_is_in_the_build_context() -> None:
    """A COPY of a missing or .dockerignore'd path fails the build; COPY --from reads a stage."""
    ignored = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    for word, args in instructions():
        if word != "COPY" or args.startswith("--from="):
            continue
        *sources, _destination = args.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            assert not any(fnmatch.fnmatch(source.rstrip("/"), pattern) for pattern in ignored), source


def test_runtime_stage_has_no_shell_commands_and_gets_the_builders_install() -> None:
    builder, runtime = stages()[0], stages()[-1]
    assert len(stages()) == 2
    name = builder[0][1].split()[-1]  # FROM image AS name
    assert [args for word, args in runtime if word == "COPY" and args.startswith(f"--from={name} ")]
    # distroless has no /bin/sh: a RUN in the final stage could not execute
    assert not [args for word, args in runtime if word == "RUN"]
    # the builder's Python and Debian release are the runtime's (compiled wheels: same ABI and glibc)
    builder_image, runtime_image = builder[0][1].split()[0], runtime[0][1].split()[0]
    assert builder_image.startswith("python:3.11-") and builder_image.endswith("-bookworm")
    assert runtime_image.startswith("gcr.io/distroless/python3-debian12:")


def test_non_root_numeric_user_matching_the_deployment() -> None:
    users = [args for word, args in stages()[-1] if word == "USER"]
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0)
    deployment = yaml.safe_load((REPO / "manifests/base/deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    contexts = [pod.get("securityContext") or {}, *(c.get("securityContext") or {} for c in pod["containers"])]
    assert int(uid) in {c.get("runAsUser") for c in contexts}


def test_read_only_root_and_no_healthcheck_or_volume() -> None:
    """Bytecode is compiled at build time and never written at run time (the root filesystem is
    read-only); mounts come from the pod spec; the kubelet probes, not Docker's HEALTHCHECK."""
    env = [args for word, args in stages()[-1] if word == "ENV"]
    assert any(re.search(r"(^|\s)PYTHONDONTWRITEBYTECODE=1(\s|$)", args) for args in env)
    assert any(word == "RUN" and "python -m compileall" in args for word, args in stages()[0])
    assert not [i for i in instructions() if i[0] in ("VOLUME", "HEALTHCHECK")]


def test_entrypoint_is_the_cli_module_in_exec_form() -> None:
    argv = dockerfile_entrypoint()
    assert argv[:4] == ["python3", "-m", "webhook.cli", "serve"]


def test_dockerignore_keeps_secrets_and_local_state_out() -> None:
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", "tests", "certs", "*.key"} <= ignored
