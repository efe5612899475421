"""What gpu-per-pod-ceiling counts (params.counts) and the GPUWebhookConfig keys of the accelerator table,
through the real door: `gpu-webhook test` on a rules directory a site would write.

The pack's suites run the defaults; here a site sets `counts: wholeGpus`, and names its own share
and slice resources, as docs/rules.md and docs/authoring.md tell it to.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.rules.rulekit import RULES, namespace, run
from webhook.engine import load_rules

CONFIG = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUWebhookConfig
metadata: {name: site}
spec:
  acceleratorResources: [nvidia.com/gpu, "nvidia.com/mig-*", example.com/vgpu]
  acceleratorShareResources: [example.com/gpu-memory]
  acceleratorSliceResources: ["nvidia.com/mig-*", example.com/vgpu]
  acceleratorSliceDeviceClasses: [mig.nvidia.com]
"""

SUITE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyTest
metadata: {name: whole-gpus}
spec:
  rules: ..
  cases:
    - name: MIG slices are not whole GPUs
      object:
        apiVersion: v1
        kind: Pod
        metadata: {name: slices, namespace: small}
        spec:
          containers:
            - {name: a, image: cuda:12, resources: {limits: {nvidia.com/mig-1g.10gb: "7", nvidia.com/gpu: "2"}}}
      namespaceObject: &small
        apiVersion: v1
        kind: Namespace
        metadata: {name: small, annotations: {gpu-webhook.io/max-gpus-per-pod: "2"}}
      expect:
        rules:
          - {rule: gpu-per-pod-ceiling, result: allowed}
    - name: whole GPUs over the ceiling are denied, named as whole GPUs
      object:
        apiVersion: v1
        kind: Pod
        metadata: {name: whole, namespace: small}
        spec:
          containers:
            - {name: a, image: cuda:12, resources: {limits: {nvidia.com/gpu: "3", example.com/vgpu: "4"}}}
      namespaceObject: *small
      expect:
        rules:
          - {rule: gpu-per-pod-ceiling, result: denied, message: "pod whole requests 3 whole GPUs; at most 2"}
    - name: devices of a DRA claim of the MIG class are not whole GPUs either
      object:
        apiVersion: v1
        kind: Pod
        metadata: {name: dra, namespace: small}
        spec:
          resourceClaims: [{name: mig, resourceClaimTemplateName: four-slices}]
          containers:
            - name: a
              image: cuda:12
              resources: {claims: [{name: mig}], limits: {deviceclass.resource.kubernetes.io/mig.nvidia.com: "3"}}
      namespaceObject: *small
      clusterObjects:
        - apiVersion: resource.k8s.io/v1
          kind: ResourceClaimTemplate
          metadata: {name: four-slices, namespace: small}
          spec:
            spec:
              devices:
                requests: [{name: mig, exactly: {deviceClassName: mig.nvidia.com, count: 4}}]
      expect:
        rules:
          - {rule: gpu-per-pod-ceiling, result: allowed}
    - name: a configured share resource alone is a GPU container, never given void
      object:
        apiVersion: v1
        kind: Pod
        metadata: {name: share, namespace: team-a}
        spec:
          containers:
            - {name: a, image: cuda:12, resources: {limits: {example.com/gpu-memory: "2048"}}}
      namespaceObject: {apiVersion: v1, kind: Namespace, metadata: {name: team-a, labels: {gpu-webhook.io/tenant: "true"}}}
      expect:
        rules:
          - {rule: visible-devices-void, result: allowed}
          - {rule: gpu-per-pod-ceiling, result: allowed}  # a GPU pod (matched), with 0 whole GPUs
"""


def site_rules(tmp_path: Path) -> Path:
    """The pack's ceiling and void rules as a site keeps them, the ceiling counting whole GPUs."""
    rules = tmp_path / "rules"
    (rules / "tests").mkdir(parents=True)
    ceiling = (RULES / "gpu-per-pod-ceiling.yaml").read_text()
    assert "    counts: devices\n" in ceiling
    (rules / "gpu-per-pod-ceiling.yaml").write_text(ceiling.replace("    counts: devices\n", "    counts: wholeGpus\n"))
    (rules / "visible-devices-void.yaml").write_text((RULES / "visible-devices-void.yaml").read_text())
    (rules / "config.yaml").write_text(CONFIG)
    (rules / "tests" / "whole-gpus.test.yaml").write_text(SUITE)
    return rules


def gpu_webhook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_site_counting_whole_gpus_with_its_own_accelerator_table(tmp_path: Path) -> None:
    done = gpu_webhook("test", str(site_rules(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed, 0 failed" in done.stdout


def test_the_same_cases_fail_with_the_default_count(tmp_path: Path) -> None:
    """The suite can fail: counting devices, the MIG pod's 9 devices are over the ceiling of 2."""
    rules = site_rules(tmp_path)
    ceiling = rules / "gpu-per-pod-ceiling.yaml"
    ceiling.write_text(ceiling.read_text().replace("    counts: wholeGpus\n", "    counts: devices\n"))
    done = gpu_webhook("test", str(rules))
    assert done.returncode != 0
    assert "MIG slices are not whole GPUs FAILED" in done.stdout


def test_an_unknown_config_key_is_a_clear_error(tmp_path: Path) -> None:
    rules = site_rules(tmp_path)
    (rules / "config.yaml").write_text(CONFIG.replace("acceleratorShareResources", "acceleratorSharedResources"))
    done = gpu_webhook("lint", str(rules))
    assert done.returncode != 0
    assert "acceleratorSharedResources" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_an_admin_named_extended_resource_of_a_mig_class_pins_no_profile(tmp_path: Path) -> None:
    """A DeviceClass's spec.extendedResourceName (KEP-5004) for MIG slices, listed in the rule's params:
    the scheduler's claim has no selector, so a namespace restricted to some profiles refuses it."""
    rules = tmp_path / "rules"
    rules.mkdir()
    text = (RULES / "mig-profiles.yaml").read_text()
    assert "    migExtendedResources: []\n" in text
    (rules / "mig-profiles.yaml").write_text(
        text.replace("    migExtendedResources: []\n", "    migExtendedResources: [example.com/mig]\n")
    )
    (rules / "config.yaml").write_text(CONFIG.replace("example.com/vgpu]", "example.com/vgpu, example.com/mig]", 1))
    pack = load_rules(rules).require()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nb", "namespace": "notebooks"},
        "spec": {
            "containers": [{"name": "nb", "image": "jupyter:1", "resources": {"limits": {"example.com/mig": "1"}}}]
        },
    }
    restricted = namespace("notebooks", annotations={"gpu-webhook.io/allowed-mig-profiles": "1g.10gb"})
    decision = run(pack, pod, restricted)
    assert not decision.allowed
    assert "requests example.com/mig, a MIG slice of any profile" in decision.denial_message
    assert run(pack, pod, namespace("notebooks")).allowed  # every profile allowed: nothing to pin


def test_a_mistyped_count_fails_the_load_naming_the_mistake(tmp_path: Path) -> None:
    """spec.paramsSchema's enum: the typo never reaches a request (a server keeps its last good rules)."""
    rules = tmp_path / "rules"
    rules.mkdir()
    text = (RULES / "gpu-per-pod-ceiling.yaml").read_text()
    (rules / "gpu-per-pod-ceiling.yaml").write_text(text.replace("    counts: devices\n", "    counts: wholeGPUs\n"))
    loaded = load_rules(rules)
    assert loaded.ruleset is None
    assert [
        "spec.params.counts: 'wholeGPUs' is not one of ['devices', 'wholeGpus']" in str(e) for e in loaded.errors
    ] == [True]


def test_without_its_schema_a_mistyped_count_denies_and_names_the_mistake(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    text = (RULES / "gpu-per-pod-ceiling.yaml").read_text()
    text = text[: text.index("  # the params' types")]
    (rules / "gpu-per-pod-ceiling.yaml").write_text(text.replace("    counts: devices\n", "    counts: wholeGPUs\n"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"containers": [{"name": "c", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    decision = run(load_rules(rules).require(), pod, namespace("team-a"))
    assert not decision.allowed
    assert "params.counts is wholeGPUs, not devices or wholeGpus" in decision.denial_message
