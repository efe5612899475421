"""The webhook configurations fail safe and match what the engine needs, and the Deployment is highly available and
passes the Pod Security `restricted` profile."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.conftest import OVERLAYS, one
from webhook.cli import build_parser
from webhook.engine import RuleSet

KUEUE = "kueue-mutating-webhook-configuration"
EXCLUDED = {"kube-system", "gpu-webhook"}
TENANT_LABEL = "gpu-webhook.io/tenant"
WORKLOAD_GROUPS = {
    "",
    "apps",
    "batch",
    "jobset.x-k8s.io",
    "kubeflow.org",
    "ray.io",
    "leaderworkerset.x-k8s.io",
}


def webhooks(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (kind, webhook)
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for webhook in one(objects, kind)["webhooks"]
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_common_webhook_fields(rendered: dict, overlay: str) -> None:
    for kind, webhook in webhooks(rendered[overlay]):
        if webhook["name"] == "policies.gpu-webhook.io":
            continue  # the policy objects themselves: test_policy_objects_are_sent_to_their_own_path
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["sideEffects"] == "None"
        assert webhook["timeoutSeconds"] <= 5  # far under the apiserver's 10 s default and 30 s max
        assert webhook["clientConfig"]["service"] == {
            "name": "gpu-webhook",
            "namespace": "gpu-webhook",
            "path": "/mutate" if kind.startswith("Mutating") else "/validate",
            "port": 443,
        }
        expressions = [
            (e["key"], e["operator"], set(e["values"])) for e in webhook["namespaceSelector"]["matchExpressions"]
        ]
        assert expressions[0] == ("kubernetes.io/metadata.name", "NotIn", EXCLUDED)
        assert all(key == TENANT_LABEL and values == {"true"} for key, _, values in expressions[1:])
        groups = {g for rule in webhook["rules"] for g in rule["apiGroups"]}
        # validating only: DRA claims (dra-claim-limits); TrainJob and AppWrapper (the Kueue rules)
        validating_only = {"resource.k8s.io", "trainer.kubeflow.org", "workload.codeflare.dev"}
        assert WORKLOAD_GROUPS <= groups <= WORKLOAD_GROUPS | validating_only
        for rule in webhook["rules"]:
            assert set(rule["operations"]) <= {"CREATE", "UPDATE"}
            assert rule["scope"] == "Namespaced"
            # the one subresource rules see: kubectl debug's ephemeral containers (KEP-277)
            assert all(r == "pods/ephemeralcontainers" or not ("/" in r or "*" in r) for r in rule["resources"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_policy_objects_are_sent_to_their_own_path(rendered: dict, overlay: str) -> None:
    (policies,) = [w for _, w in webhooks(rendered[overlay]) if w["name"] == "policies.gpu-webhook.io"]
    assert policies["clientConfig"]["service"]["path"] == "/policies"
    assert policies["rules"] == [
        {
            "apiGroups": ["gpu-webhook.io"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["gpupolicies", "gpupolicyexceptions", "gpupolicyoverlays"],
            "scope": "*",
        }
    ]
    assert "matchConditions" not in policies


@pytest.mark.parametrize(("overlay", "policy"), [("audit", "Ignore"), ("enforce", "Fail")])
def test_failure_policy_per_overlay(rendered: dict, overlay: str, policy: str) -> None:
    assert {w["failurePolicy"] for _, w in webhooks(rendered[overlay])} == {policy}
    args = one(rendered[overlay], "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--mode={overlay}" in args


def test_mutating_configuration_orders_before_kueue_and_reinvokes(rendered: dict) -> None:
    mutating = one(rendered["enforce"], "MutatingWebhookConfiguration")
    assert mutating["metadata"]["name"] < KUEUE  # the apiserver calls them in name order
    assert all(w["reinvocationPolicy"] == "IfNeeded" for w in mutating["webhooks"])
    resources = {r for rule in mutating["webhooks"][0]["rules"] for r in rule["resources"]}
    assert "replicasets" not in resources  # see webhooks.yaml: Deployment/ReplicaSet template fight


def test_only_the_mutating_webhook_is_filtered_to_gpu_objects(rendered: dict) -> None:
    mutating = one(rendered["enforce"], "MutatingWebhookConfiguration")["webhooks"][0]
    validating = one(rendered["enforce"], "ValidatingWebhookConfiguration")["webhooks"][0]
    assert [c["name"] for c in mutating["matchConditions"]] == ["rule-inputs-changed", "requests-accelerators"]
    assert [c["name"] for c in validating["matchConditions"]] == ["rule-inputs-changed"]


def test_every_mutating_rule_is_gpu_only(pack: RuleSet) -> None:
    """The mutating webhook only sees GPU objects; a mutation for CPU-only pods would never run."""
    mutating = [r for r in pack.rules if r.mutations]
    assert mutating
    for rule in mutating:
        # the second mutating entry sends every object of tenant namespaces
        tenant_only = rule.match.namespace_selector is not None and (TENANT_LABEL, "true") in (
            rule.match.namespace_selector.match_labels
        )
        assert rule.match.gpu is True or tenant_only, f"{rule.name} mutates non-GPU objects outside tenants"


def test_the_two_mutating_entries_split_namespaces_by_the_tenant_label(rendered: dict) -> None:
    entries = one(rendered["enforce"], "MutatingWebhookConfiguration")["webhooks"]
    tenant_selector = [
        [(e["key"], e["operator"]) for e in w["namespaceSelector"]["matchExpressions"] if e["key"] == TENANT_LABEL]
        for w in entries
    ]
    assert tenant_selector == [[(TENANT_LABEL, "NotIn")], [(TENANT_LABEL, "In")]]  # disjoint: no double mutation
    # tenants: every pod (NVIDIA_VISIBLE_DEVICES=void goes into GPU-less ones) and kubectl debug
    assert [c["name"] for c in entries[1]["matchConditions"]] == ["rule-inputs-changed"]
    assert "pods/ephemeralcontainers" in {r for rule in entries[1]["rules"] for r in rule["resources"]}


def test_some_validating_rule_needs_cpu_only_pods(pack: RuleSet) -> None:
    """Why the validating webhook has no GPU matchCondition."""
    assert {r.name for r in pack.rules if r.validate and r.match.gpu is not True} >= {
        "cpu-pods-off-gpu-nodes",
        "no-visible-devices-without-gpu",
    }


def pod_spec(rendered: dict, overlay: str = "enforce") -> dict[str, Any]:
    return one(rendered[overlay], "Deployment")["spec"]["template"]["spec"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pod_security_restricted(rendered: dict, overlay: str) -> None:
    """The checks of the `restricted` Pod Security Standard (v1.25+) that a spec can fail."""
    spec = pod_spec(rendered, overlay)
    pod_sc = spec.get("securityContext", {})
    assert not any(spec.get(f) for f in ("hostNetwork", "hostPID", "hostIPC"))
    for volume in spec["volumes"]:
        assert set(volume) - {"name"} <= {"configMap", "secret", "emptyDir", "projected", "downwardAPI", "csi"}
    containers = spec["containers"] + spec.get("initContainers", [])
    for container in containers:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert not sc.get("privileged")
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
        assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True
        assert sc.get("runAsUser", pod_sc.get("runAsUser")) != 0
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile"))
        assert seccomp["type"] in ("RuntimeDefault", "Localhost")
        assert sc["readOnlyRootFilesystem"] is True  # beyond restricted: our own bar
        assert not any(p.get("hostPort") for p in container.get("ports", []))
    namespace = one(rendered[overlay], "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_high_availability(rendered: dict) -> None:
    deployment = one(rendered["enforce"], "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert spec["priorityClassName"] == "system-cluster-critical"
    keys = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    pdb = one(rendered["enforce"], "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["selector"] == deployment["spec"]["selector"]
    container = spec["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]


def test_no_gpu_node_toleration_and_prefers_cpu_nodes(rendered: dict) -> None:
    spec = pod_spec(rendered)
    for toleration in spec.get("tolerations", []):
        assert toleration.get("key") in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        assert toleration["effect"] == "NoExecute"
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"} in preferred[0]["preference"][
        "matchExpressions"
    ]


def serve_args(rendered: dict, overlay: str, entrypoint: list[str]) -> Any:
    container = pod_spec(rendered, overlay)["containers"][0]
    return build_parser().parse_args([*entrypoint, *container["args"]])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_graceful_shutdown_fits_the_grace_period(rendered: dict, overlay: str, entrypoint: list[str]) -> None:
    """preStop sleep, then SIGTERM: drain delay, then in-flight requests, all before SIGKILL."""
    spec = pod_spec(rendered, overlay)
    container = spec["containers"][0]
    sleep = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    args = serve_args(rendered, overlay, entrypoint)
    assert sleep >= 5 and args.drain_delay > 0
    assert sleep + args.drain_delay + args.shutdown_timeout < spec["terminationGracePeriodSeconds"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_container_args_and_mounts_agree_with_the_image(rendered: dict, overlay: str, entrypoint: list[str]) -> None:
    args = serve_args(rendered, overlay, entrypoint)
    assert args.command == "serve" and args.mode == overlay
    container = pod_spec(rendered, overlay)["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (args.port, args.metrics_port, args.metrics_host) == (ports["https"], ports["metrics"], "0.0.0.0")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {args.cert_dir, *args.rules} <= mounts
    assert all(m.get("readOnly") for m in container["volumeMounts"] if m["mountPath"] != "/tmp")
