"""`gpu-webhook explain --cluster` explains against what a real apiserver holds: the object's Namespace,
the PriorityClasses (and GPUPolicy objects, exceptions and DRA objects), read as `audit --cluster` reads them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import TENANT_LABEL, gpu_pod
from tests.e2e.test_policy_objects import GROUP_VERSION, crds  # noqa: F401 (crds: a fixture)
from tests.support import REPO
from tests.support.envtest import EnvTest

NAMESPACE = "team-explain"


@pytest.fixture(scope="module")
def cluster(apiserver: EnvTest) -> EnvTest:
    apiserver.create_namespace(NAMESPACE, {TENANT_LABEL: "true"})
    for name, value in (("gpu-batch", 100), ("gpu-critical", 100000)):
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        created = apiserver.create(body)
        assert created.status in (201, 409), created.body  # another module may have made it
    return apiserver


def explain(path: Path, *extra: str) -> tuple[int, str, str]:
    """The CLI as a user runs it (a fresh interpreter of this environment)."""
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "explain", "-f", str(path), "--no-color", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def test_explain_cluster_reads_the_namespace_and_the_priority_classes(cluster: EnvTest, tmp_path: Path) -> None:
    sneaky = gpu_pod("sneaky", NAMESPACE, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    serving = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": NAMESPACE},
        "spec": {"template": {"metadata": {"labels": {"app": "vllm"}}, "spec": gpu_pod("x", NAMESPACE)["spec"]}},
    }
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [sneaky, serving]}))

    offline = explain(listed)
    assert offline[0] == 0, offline  # the tenant rules cannot see the Namespace: nothing denies
    assert "not evaluated: no namespace context" in offline[1] and "hint:" in offline[2]

    code, out, err = explain(listed, "--cluster", "--kubeconfig", str(cluster.kubeconfig))
    assert code == 1, (out, err)
    assert "no namespace context" not in out and "hint:" not in err
    assert out.count("Decision:") == 2  # each item of the List explained
    assert "[no-device-env-in-tenants] pod sneaky: container main sets NVIDIA_VISIBLE_DEVICES" in out
    # the live PriorityClasses: the serving class exists, so the webhook (and explain) sets it
    assert '[priority-class-by-workload] add /spec/template/spec/priorityClassName "gpu-critical"' in out


def test_explain_cluster_says_which_server_it_cannot_reach(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(gpu_pod("p", NAMESPACE)))
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    code, _, err = explain(pod, "--cluster", "--kubeconfig", str(config))
    assert code == 2 and "host='127.0.0.1', port=9" in err and "Traceback" not in err


def test_explain_cluster_uses_the_clusters_policy_objects_and_exceptions(
    cluster: EnvTest,
    crds: list[str],  # noqa: F811 (the fixture: the shipped CRDs installed, the server watching them)
    tmp_path: Path,
) -> None:
    warn = {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicy",
        "metadata": {"name": "explain-from-cluster"},
        "spec": {
            "action": "Warn",
            "match": {"kinds": ["Pod"], "operations": ["CREATE"]},
            "validate": {"expression": "false", "message": "a rule that lives in the cluster only"},
        },
    }
    exception = {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyException",
        "metadata": {"name": "debugging", "namespace": NAMESPACE},
        "spec": {
            "rules": ["no-node-name-in-tenants"],
            "match": {"kinds": ["Pod"], "names": ["sneaky"]},
            "expires": "2099-01-01T00:00:00Z",
            "reason": "vendor debugging session",
        },
    }
    for body in (warn, exception):
        made = cluster.create(body)
        assert made.status == 201, made.body
    pod = tmp_path / "pod.yaml"
    pinned = gpu_pod("sneaky", NAMESPACE)
    pinned["spec"]["nodeName"] = "gpu-node-1"  # past the scheduler: no-node-name-in-tenants, which is exceptable
    pod.write_text(yaml.safe_dump(pinned))
    code, out, err = explain(pod, "--cluster", "--kubeconfig", str(cluster.kubeconfig))
    assert "warning [explain-from-cluster] a rule that lives in the cluster only" in out, (out, err)
    assert "excepted [no-node-name-in-tenants] excepted by team-explain/debugging: vendor debugging session" in out
    assert code == 0, out  # the one Deny rule that acted is excepted
