"""Fixtures of the end-to-end layer: a real kube-apiserver, the real `gpu-webhook serve`, the rendered webhooks.

One apiserver per session (3-5 s to start here) and one webhook server; tests isolate
themselves by namespace. Everything skips with one line when `KUBEBUILDER_ASSETS` is unset.
The fixtures, all session-scoped:

    apiserver       EnvTest: etcd + kube-apiserver on 127.0.0.1
    webhook_certs   `gpu-webhook certs --keep-ca-key`: the CA the rendered caBundle holds
    webhook_server  `gpu-webhook serve --namespaces watch --kubeconfig <apiserver's>`, cert for 127.0.0.1
    manifests       `gpu-webhook manifests --ca <webhook_certs>`, parsed
    webhooks        the rendered webhook configurations installed against webhook_server, seen to be called
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import REPO, RULES
from tests.support.envtest import EnvTest, Response, free_port, log_tail, skip_reason, spawn, terminate
from webhook.certs import CA_FILE, Bundle, generate_serving, load_ca, write_bundle
from webhook.engine import WorkloadKind
from webhook.engine.workloads import KINDS

PROBE_NAMESPACE = "e2e-probe"
# What clusters that run GPU workloads set: privileged containers allowed (the kubelet's and the
# GPU Operator's own pods need them; every distribution's default), and the DRA beta versions served
# beside v1 so that objects written for 1.32-1.33 (resource.k8s.io/v1beta1) are admitted and converted.
CLUSTER_FLAGS = (
    "--allow-privileged=true",
    "--runtime-config=resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true",
)
TENANT_LABEL = "gpu-webhook.io/tenant"
E2E_IMAGE = "registry.example.com/gpu-webhook@sha256:" + "0" * 64


def gpu_webhook(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would (a fresh interpreter of this environment); fail the test on a non-zero exit."""
    env = {k: v for k, v in os.environ.items() if k != "GPU_WEBHOOK_RULES"}
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"gpu-webhook {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done


def gpu_pod(name: str, namespace: str, **extra: Any) -> dict[str, Any]:
    """A pod with one container asking for one NVIDIA GPU, and nothing the pack denies in a plain tenant namespace."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04",
        "resources": {
            "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"},
            "limits": {"memory": "4Gi", "nvidia.com/gpu": "1"},
        },
    }
    container.update(extra)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container]},
    }


@dataclass
class WebhookServer:
    """A running `gpu-webhook serve`: where the apiserver reaches it and the CA that signed its certificate."""

    url: str
    ca_pem: bytes = field(repr=False)
    cert_dir: Path
    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    ssl_context: ssl.SSLContext = field(repr=False)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=5, context=self.ssl_context) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def answered(self, endpoint: str) -> float:
        """Admission requests answered on /mutate or /validate so far (gpu_webhook_requests_total)."""
        status, text = self.get("/metrics")
        assert status == 200, text
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "gpu_webhook_requests"
            for sample in family.samples
            if sample.name == "gpu_webhook_requests_total" and sample.labels.get("endpoint") == endpoint
        )

    def logs(self) -> str:
        return f"--- gpu-webhook serve log (tail) ---\n{log_tail(self.log, 60)}"


@pytest.fixture(scope="session")
def apiserver() -> Iterator[EnvTest]:
    """A throwaway etcd + kube-apiserver for the whole session (skipped without KUBEBUILDER_ASSETS)."""
    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    with EnvTest.start(apiserver_args=CLUSTER_FLAGS) as env:
        yield env


@pytest.fixture(scope="session")
def webhook_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and serving certificate from `gpu-webhook certs`, the CA key kept to sign the 127.0.0.1 one."""
    directory = tmp_path_factory.mktemp("webhook-tls")
    gpu_webhook("certs", "--out", str(directory), "--keep-ca-key")
    return directory


@pytest.fixture(scope="session")
def webhook_server(
    apiserver: EnvTest, webhook_certs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookServer]:
    """`gpu-webhook serve` on 127.0.0.1, reading Namespaces, PriorityClasses and DRA objects from `apiserver`.

    Its certificate names 127.0.0.1 (the apiserver calls a `url`, not the Service) and is signed by
    the CA `gpu-webhook certs` made, so the caBundle `manifests` renders is the one that fits.
    """
    serving = tmp_path_factory.mktemp("serve-tls")
    ca_cert, ca_key = load_ca(webhook_certs)
    cert, key = generate_serving(ca_cert, ca_key, ["localhost"], ["127.0.0.1"])
    write_bundle(Bundle(ca_cert, ca_key, cert, key), serving)  # ca.crt, tls.crt, tls.key (0600); not the CA key
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "GPU_WEBHOOK_RULES"}
    process = spawn(
        [
            sys.executable,
            "-m",
            "webhook.cli",
            "serve",
            "--port",
            str(port),
            "--cert-dir",
            str(serving),
            "--rules",
            str(RULES),
            "--namespaces",
            "watch",
            "--kubeconfig",
            str(apiserver.kubeconfig),
            # nothing is in flight at teardown; the 25 s default would only matter if a test hung
            "--shutdown-timeout",
            "5",
        ],
        log,
        env,
    )
    try:
        server = WebhookServer(
            url=f"https://127.0.0.1:{port}",
            ca_pem=(serving / CA_FILE).read_bytes(),
            cert_dir=serving,
            log=log,
            process=process,
            ssl_context=ssl.create_default_context(cafile=str(serving / CA_FILE)),
        )
        _wait_until_ready(server, timeout=30.0)
        yield server
    finally:
        terminate(process, timeout=10)


def _wait_until_ready(server: WebhookServer, timeout: float) -> None:
    """Until /readyz answers 200: the rules loaded and the namespace watch has listed the cluster."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while True:
        if server.process.poll() is not None:
            pytest.fail(f"gpu-webhook serve exited with status {server.process.returncode}\n{server.logs()}")
        try:
            status, text = server.get("/readyz")
            if status == 200:
                return
            last = f"{status} {text}"
        except OSError as error:
            last = str(error)
        if time.monotonic() > deadline:
            pytest.fail(f"gpu-webhook serve not ready within {timeout:.0f} s ({last})\n{server.logs()}")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def manifests(webhook_certs: Path) -> list[dict[str, Any]]:
    """Every document `gpu-webhook manifests --ca DIR` renders (the enforce overlay)."""
    # the enforce overlay refuses the placeholder image (its webhooks fail closed); the image is
    # never pulled here, the Deployment is not installed, so any digest does
    rendered = gpu_webhook("manifests", "--ca", str(webhook_certs), "--rules", str(RULES), "--image", E2E_IMAGE)
    return [document for document in yaml.safe_load_all(rendered.stdout) if document]


@pytest.fixture(scope="session")
def webhooks(apiserver: EnvTest, webhook_server: WebhookServer, manifests: list[dict[str, Any]]) -> list[str]:
    """The rendered webhook configurations, installed against `webhook_server` and seen to reach it.

    Readiness is observed at the webhook's end: a dry-run GPU pod in a tenant namespace goes
    through the tenant mutating entry and the validating entry, and the server's request counters
    for /mutate and /validate both move once the apiserver has picked the configurations up. That
    is independent of what the pack decides, so a test that asserts decisions fails on its own
    assertion, not in this fixture.
    """
    installed = apiserver.install_webhooks(manifests, webhook_server.url, webhook_server.ca_pem)
    apiserver.create_namespace(PROBE_NAMESPACE, {TENANT_LABEL: "true"})
    before = {endpoint: webhook_server.answered(endpoint) for endpoint in ("mutate", "validate")}

    def called(_answer: Response) -> bool:
        return all(webhook_server.answered(endpoint) > count for endpoint, count in before.items())

    try:
        apiserver.wait_for_webhooks(gpu_pod("probe", PROBE_NAMESPACE), called, timeout=30.0)
    except TimeoutError as error:
        pytest.fail(f"{error}\n{webhook_server.logs()}\n{apiserver.logs()}")
    return installed


def workload_crd(kind: WorkloadKind) -> dict[str, Any]:
    """A minimal CRD for a kind of the engine's table: its group, versions and plural, any content."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{kind.group}"},
        "spec": {
            "group": kind.group,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "listKind": f"{kind.kind}List",
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": index == 0,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
                for index, version in enumerate(kind.versions)
            ],
        },
    }


BUILT_IN_GROUPS = {"", "apps", "batch", "resource.k8s.io"}


@pytest.fixture(scope="session")
def workload_crds(apiserver: EnvTest) -> list[str]:
    """A CRD for every kind of the engine's table that Kubernetes does not serve (JobSet, PyTorchJob, RayService,
    AppWrapper, TrainJob, ...), Established: the job kinds' controllers are not needed to admit their objects."""
    names = []
    for kind in KINDS:
        if kind.group in BUILT_IN_GROUPS:
            continue
        body = workload_crd(kind)
        made = apiserver.create(body)
        assert made.ok or made.status == 409, f"CRD {body['metadata']['name']}: {made.status} {made.message}"
        names.append(body["metadata"]["name"])
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            answer = apiserver.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (answer.body or {}).get("status", {}).get("conditions", [])
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            assert time.monotonic() < deadline, f"CRD {name} not Established: {conditions}"
            time.sleep(0.1)
    return names
