"""The Dockerfile, read as text (no Docker engine here): multi-stage, small non-root runtime
without a shell, read-only-root friendly, no HEALTHCHECK, `serve` with in-cluster flags."""

from __future__ import annotations

import json
import re

from tests.support import REPO

DOCKERFILE = REPO / "Dockerfile"


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


def test_multi_stage_with_a_wheel_building_builder() -> None:
    builder, runtime = stages()[0], stages()[-1]
    assert len(stages()) >= 2
    assert " AS builder" in builder[0][1]
    assert any(word == "RUN" and "pip wheel" in args for word, args in builder)
    assert any(word == "COPY" and args.startswith("--from=builder") for word, args in runtime)


def test_runtime_is_distroless_python_without_shell() -> None:
    runtime = stages()[-1]
    base = runtime[0][1]
    assert base.startswith("gcr.io/distroless/python3-debian12")
    # distroless has no /bin/sh: any RUN (shell form) in the final stage could not even execute
    assert not [args for word, args in runtime if word == "RUN"]
    builder_base = stages()[0][0][1]
    assert "3.11" in builder_base and "bookworm" in builder_base  # same Python and glibc as debian12


def test_non_root_numeric_user_matching_the_deployment() -> None:
    users = [args for word, args in stages()[-1] if word == "USER"]
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0)
    deployment = (REPO / "manifests/base/deployment.yaml").read_text()
    assert f"runAsUser: {uid}" in deployment


def test_read_only_root_friendly_environment() -> None:
    env = " ".join(args for word, args in stages()[-1] if word == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert any(word == "RUN" and "compileall" in args for word, args in stages()[0])  # pyc made at build
    assert not [args for word, args in stages()[-1] if word == "VOLUME"]  # mounts come from the pod spec


def test_no_healthcheck() -> None:
    assert not [i for i in instructions() if i[0] == "HEALTHCHECK"]


def test_entrypoint_serves_in_cluster() -> None:
    argv = dockerfile_entrypoint()
    assert argv[:4] == ["python3", "-m", "webhook.cli", "serve"]
    flags = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert flags == {"--host": "0.0.0.0", "--cert-dir": "/etc/gpu-webhook/tls", "--rules": "/etc/gpu-webhook/rules"}


def test_dockerignore_keeps_secrets_and_local_state_out() -> None:
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", "tests", "certs", "*.key"} <= ignored
