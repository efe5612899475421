"""User errors end in one clear line and exit 2, never a traceback: each through the command a user runs."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.authoring.conftest import REPO
from tests.support import free_port

BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\xfd"
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: a}\nspec: {containers: [{name: c, image: i}]}\n"


def gpu_webhook(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60):
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=env,
        timeout=timeout,
        check=False,
    )


def assert_clean(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    for text in expected:
        assert text in result.stderr, result.stderr


def test_binary_files_in_explain_and_namespace_objects(cli, tmp_path):
    binary = tmp_path / "blob.yaml"
    binary.write_bytes(BINARY)
    pod = tmp_path / "pod.yaml"
    pod.write_text(POD)
    code, _, err = cli("explain", "-f", str(binary))
    assert code == 2 and "blob.yaml: not UTF-8 text" in err
    code, _, err = cli("explain", "-f", str(pod), "--namespace-objects", str(binary))
    assert code == 2 and "blob.yaml: not UTF-8 text" in err
    # audit reports the unreadable Namespace file and audits the rest
    code, out, err = cli("audit", str(pod), "--namespace-objects", str(binary), "-o", "json")
    assert code == 2 and "blob.yaml: not UTF-8 text" in err and '"name":"p"' in out


def test_serve_on_a_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = gpu_webhook("serve", "--port", str(port), "--cert-dir", str(tmp_path / "certs"))
    assert_clean(result, "address already in use")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--port", "70000"), "--port 70000: a port is a number from 0 to 65535"),
        (("--host", "no-such-host.invalid"), "cannot resolve the address to listen on"),
    ],
)
def test_serve_with_an_invalid_port_or_host(tmp_path, args, expected):
    assert_clean(gpu_webhook("serve", *args, "--cert-dir", str(tmp_path / "certs")), expected)


def test_serve_with_a_cert_dir_that_is_a_file_or_unwritable(tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    result = gpu_webhook("serve", "--port", str(free_port()), "--cert-dir", str(file))
    assert_clean(result, "exists and is not a directory")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        result = gpu_webhook("serve", "--port", str(free_port()), "--cert-dir", str(locked / "certs"))
        assert_clean(result, "Permission denied")
    result = gpu_webhook("serve", "--port", str(free_port()), "--cert-dir", "/proc/gpu-webhook-certs")
    assert_clean(result)


def test_schema_and_certs_out_onto_a_file_or_an_unwritable_path(cli, tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    code, _, err = cli("schema", "--out", str(file))
    assert code == 2 and "exists and is not a directory" in err
    code, _, err = cli("certs", "--out", str(file))
    assert code == 2 and "exists and is not a directory" in err
    code, _, err = cli("schema", "--out", "/proc/gpu-webhook-schemas")
    assert code == 2 and "cannot write" in err
    code, _, err = cli("certs", "--out", "/proc/gpu-webhook-certs")
    assert code == 2 and "cannot write" in err


def test_certs_never_replaces_a_ca_silently(cli, tmp_path):
    out = tmp_path / "certs"
    assert cli("certs", "--out", str(out), "--keep-ca-key")[0] == 0
    ca = (out / "ca.crt").read_bytes()
    code, _, err = cli("certs", "--out", str(out))
    assert code == 2 and "ca.crt exists" in err and "--reuse-ca" in err
    assert (out / "ca.crt").read_bytes() == ca
    assert cli("certs", "--out", str(out), "--reuse-ca")[0] == 0  # a renewal keeps the CA
    assert (out / "ca.crt").read_bytes() == ca
    assert cli("certs", "--out", str(out), "--force")[0] == 0
    assert (out / "ca.crt").read_bytes() != ca
    assert not (out / "ca.key").exists()  # the old CA's key went with it


def test_gen_rules_outside_the_venv_says_what_to_do(tmp_path):
    """`python docs/gen_rules.py` with a Python that lacks the project's dependencies."""
    python = shutil.which("python3") or sys.executable
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONNOUSERSITE": "1"}
    probe = subprocess.run([python, "-c", "import cel_expr_python"], capture_output=True, env=env, check=False)
    if probe.returncode == 0:
        pytest.skip("the system python has the project's dependencies")
    result = subprocess.run(
        [python, str(REPO / "docs" / "gen_rules.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2 and ".venv/bin/python docs/gen_rules.py" in result.stderr


def test_a_closed_pipe_is_not_an_error():
    """`gpu-webhook audit ... | head`: the reader leaving early is not worth a message."""
    result = subprocess.run(
        ["bash", "-c", f"cat examples/*.yaml | {sys.executable} -m webhook.cli audit - -o table | head -1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout.startswith("CronJob "), result.stderr
    assert re.fullmatch(r"gpu-webhook: \d+ rules from rules/ \(the installed pack\)\n", result.stderr), result.stderr


def test_explain_names_what_it_was_given_instead_of_an_object(cli, tmp_path):
    review = REPO / "examples" / "reviews" / "create-gpu-pod.json"
    code, _, err = cli("explain", "-f", str(review))
    assert code == 2 and "an AdmissionReview; explain reads the object" in err
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text\n")
    code, _, err = cli("explain", "-f", str(scalar))
    assert code == 2 and "every document must be a Kubernetes object" in err
    two = tmp_path / "two.yaml"
    two.write_text(POD + "---\n" + POD)
    code, _, err = cli("explain", "-f", str(two), "--old", str(two), "--operation", "UPDATE")
    assert code == 2 and "--old goes with one object, found 2" in err
