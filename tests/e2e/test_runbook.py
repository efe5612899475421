"""docs/operations.md §6's runbook, run exactly as written against a real kube-apiserver.

The configurations `gpu-webhook manifests` renders are installed pointing at a port nothing listens
on: the webhook is down. Then every object a tenant may create, of every kind the kind table knows
(CPU and GPU pods, every workload kind, DRA claims and templates) and a GPUPolicy, is refused
(`failed calling webhook`). The doc's fail-open commands are run (through kubectl when it is
installed, as a shell runs them; else each JSON Patch it holds is sent through the apiserver's
PATCH, as kubectl would): every one of those objects is then admitted. The doc's closing commands
are run: every one is refused again, and every entry is back at `Fail` as rendered.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_runbook import documented
from tests.e2e.conftest import TENANT_LABEL, gpu_pod
from tests.e2e.test_registration_sync import restored  # noqa: F401 (a fixture: the configurations put back)
from tests.support import RULES
from tests.support.envtest import EnvTest, Response
from webhook.certs import CA_FILE
from webhook.engine.workloads import KINDS
from webhook.install.registration import CONFIGURATION_NAMES, MUTATING, VALIDATING

NAMESPACE = "e2e-runbook"
NOBODY = "https://127.0.0.1:9"  # the discard port: the server is stopped
CPU_TEMPLATE = {
    "metadata": {"labels": {"app": "x"}},
    "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], "restartPolicy": "Never"},
}
RESOURCE = {
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations": "validatingwebhookconfiguration",
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations": "mutatingwebhookconfiguration",
}


def tenant_objects() -> list[dict[str, Any]]:
    """One object of every kind a tenant may create that the webhooks see, all harmless."""
    meta = {"name": "x", "namespace": NAMESPACE}
    cpu_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": dict(meta), "spec": copy.deepcopy(CPU_TEMPLATE["spec"])}
    objects = [cpu_pod, gpu_pod("gpu", NAMESPACE)]
    selector = {"matchLabels": {"app": "x"}}
    built_in = {
        "Deployment": {"selector": selector, "template": CPU_TEMPLATE},
        "StatefulSet": {"selector": selector, "serviceName": "x", "template": CPU_TEMPLATE},
        "DaemonSet": {"selector": selector, "template": CPU_TEMPLATE},
        "ReplicaSet": {"selector": selector, "template": CPU_TEMPLATE},
        "Job": {"template": CPU_TEMPLATE},
        "CronJob": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": CPU_TEMPLATE}}},
        "ResourceClaim": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "ResourceClaimTemplate": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
        },
    }
    for kind in KINDS:
        if kind.kind == "Pod":
            continue
        spec = copy.deepcopy(built_in.get(kind.kind, {"note": "any content: its CRD preserves unknown fields"}))
        if kind.kind in ("Deployment", "DaemonSet", "ReplicaSet", "StatefulSet"):
            spec["template"]["spec"]["restartPolicy"] = "Always"
        if kind.kind == "CronJob":
            spec["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
        api = f"{kind.group}/{kind.versions[0]}" if kind.group else kind.versions[0]
        objects.append({"apiVersion": api, "kind": kind.kind, "metadata": dict(meta), "spec": spec})
    policy = next(d for d in yaml.safe_load_all((RULES / "gpu-toleration.yaml").read_text()) if d)
    policy["metadata"] = {"name": "e2e-runbook-policy"}
    return [*objects, policy]


def outcomes(apiserver: EnvTest, objects: list[dict[str, Any]]) -> dict[str, str]:
    """kind -> admitted, or refused (the webhook could not be called), or what else the apiserver said."""
    out = {}
    for obj in objects:
        answer: Response = apiserver.dry_run_create(obj)
        key = f"{obj['kind']}/{obj['metadata']['name']}"
        if answer.ok:
            out[key] = "admitted"
        elif "failed calling webhook" in answer.message:
            out[key] = "refused"
        else:
            out[key] = f"{answer.status} {answer.message[:300]}"
    return out


def until(apiserver: EnvTest, objects: list[dict[str, Any]], wanted: str, timeout: float = 30.0) -> dict[str, str]:
    """Dry-run every object until each is `wanted` (the apiserver picks webhook changes up shortly after)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = outcomes(apiserver, objects)
        if set(seen.values()) == {wanted} or time.monotonic() > deadline:
            return seen
        time.sleep(0.3)


def blocks() -> tuple[list[str], list[str]]:
    """The doc's two command blocks: (fail open, close again), each a list of command lines."""
    found = [block.strip().splitlines() for block in re.findall(r"```sh\n(.*?)```", documented(), flags=re.S)]
    assert len(found) == 2 and all(found), found
    return found[0], found[1]


def runner(apiserver: EnvTest) -> Callable[[str], None]:
    """Runs one documented line: with kubectl as a shell would, else its JSON Patch through PATCH."""
    if shutil.which("kubectl"):

        def with_kubectl(line: str) -> None:
            done = subprocess.run(
                ["bash", "-c", line],
                # HOME: kubectl keeps its discovery cache there, never in the checkout
                env={
                    "KUBECONFIG": str(apiserver.kubeconfig),
                    "PATH": os.environ.get("PATH", ""),
                    "HOME": str(apiserver.directory),
                },
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"

        return with_kubectl

    def with_patch(line: str) -> None:
        words = shlex.split(line)
        assert words[:2] == ["kubectl", "patch"] and words[4:6] == ["--type=json", "-p"], line
        collection = {v: k for k, v in RESOURCE.items()}[words[2]]
        answer = apiserver.request(
            "PATCH",
            f"{collection}/{words[3]}",
            json.loads(words[6]),
            headers={"Content-Type": "application/json-patch+json"},
        )
        assert answer.ok, f"{line}: {answer.status} {answer.message}"

    return with_patch


def failure_policies(apiserver: EnvTest) -> dict[str, str]:
    out = {}
    for kind in (MUTATING, VALIDATING):
        path = f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{CONFIGURATION_NAMES[kind]}"
        for webhook in apiserver.request("GET", path).body["webhooks"]:
            out[webhook["name"]] = webhook["failurePolicy"]
    return out


@pytest.fixture
def stopped_webhook(
    apiserver: EnvTest,
    manifests: list[dict[str, Any]],
    webhook_certs: Path,
    workload_crds: list[str],
    restored: None,  # noqa: F811
) -> list[dict[str, Any]]:
    """The rendered configurations pointing at nothing, the shipped CRDs Established, a tenant namespace."""
    for crd in (d for d in manifests if d["kind"] == "CustomResourceDefinition"):
        made = apiserver.create(crd)
        assert made.ok or made.status == 409, made.body
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        deadline = time.monotonic() + 30
        while not any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (apiserver.request("GET", path).body.get("status") or {}).get("conditions") or []
        ):
            assert time.monotonic() < deadline, f"{crd['metadata']['name']} not Established"
            time.sleep(0.2)
    if not apiserver.request("GET", f"/api/v1/namespaces/{NAMESPACE}").ok:
        apiserver.create_namespace(NAMESPACE, {TENANT_LABEL: "true"})
    apiserver.install_webhooks(manifests, NOBODY, (webhook_certs / CA_FILE).read_bytes())
    return manifests


def test_the_runbook_opens_every_webhook_and_closes_them_again(
    apiserver: EnvTest, stopped_webhook: list[dict[str, Any]]
) -> None:
    rendered = {
        w["name"]: w["failurePolicy"]
        for d in stopped_webhook
        if d["kind"] in (MUTATING, VALIDATING)
        for w in d["webhooks"]
    }
    assert set(rendered.values()) == {"Fail"} and len(rendered) == 4
    objects = tenant_objects()
    run = runner(apiserver)
    opening, closing = blocks()

    down = until(apiserver, objects, "refused")
    assert set(down.values()) == {"refused"}, down  # every kind goes through a webhook that is down

    for line in opening:
        run(line)
    assert set(failure_policies(apiserver).values()) == {"Ignore"}
    opened = until(apiserver, objects, "admitted")
    assert set(opened.values()) == {"admitted"}, opened

    for line in closing:
        run(line)
    assert failure_policies(apiserver) == rendered
    closed = until(apiserver, objects, "refused")
    assert set(closed.values()) == {"refused"}, closed
    print(f"\nrunbook: {len(objects)} objects of {len({o['kind'] for o in objects})} kinds: refused, admitted, refused")


def test_the_runbook_changes_nothing_in_a_configuration_whose_entries_moved(
    apiserver: EnvTest, stopped_webhook: list[dict[str, Any]]
) -> None:
    """Entries reordered by hand: the name test at index 0 fails, and no entry is opened (RFC 6902)."""
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpu-webhook-validating"
    current = apiserver.request("GET", path).body
    current["webhooks"].reverse()
    assert apiserver.request("PUT", path, current).ok
    opening, _closing = blocks()
    (validating,) = [line for line in opening if "validatingwebhookconfiguration" in line]
    with pytest.raises(AssertionError):
        runner(apiserver)(validating)
    assert {w["failurePolicy"] for w in apiserver.request("GET", path).body["webhooks"]} == {"Fail"}
