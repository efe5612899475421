"""Device routes around the device plugin: the size guard on host paths (a tenant's string is split
by no-gpu-device-hostpath) and the toolkit's volume-mount device list, through the default pack."""

from __future__ import annotations

from tests.rules.rulekit import RULES, namespace, run
from webhook.engine import load_rules

TENANT = namespace("team-a", labels={"gpu-webhook.io/tenant": "true"})


def pod_with(volumes: list[dict], mounts: list[dict] | None = None) -> dict:
    container = {"name": "main", "image": "busybox", "volumeMounts": mounts or []}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"volumes": volumes, "containers": [container]},
    }


def test_a_host_path_over_path_max_is_denied_without_splitting_it() -> None:
    pack = load_rules(RULES).ruleset
    path = "/" + "a/" * 20000  # 40,001 characters, 20,000 components
    decision = run(pack, pod_with([{"name": "v", "hostPath": {"path": path}}]), TENANT)
    assert not decision.allowed
    assert any(v.rule == "no-gpu-device-hostpath" for v in decision.violations)
    assert not [e for e in decision.errors if e.rule == "no-gpu-device-hostpath"]  # denied by the guard, not an error


def test_a_long_mount_path_is_matched_in_linear_time_not_split() -> None:
    pack = load_rules(RULES).ruleset
    mount = {"name": "v", "mountPath": "/var/run/" + "./" * 20000 + "nvidia-container-devices/all"}
    decision = run(pack, pod_with([{"name": "v", "hostPath": {"path": "/dev/null"}}], [mount]), TENANT)
    assert any(v.rule == "no-device-list-mounts-in-tenants" for v in decision.violations)
