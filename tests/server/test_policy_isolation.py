"""One broken policy object is the only one left out (webhook/policies/isolation.py), in the fast loop.

The server around it (RuleStore, /readyz, the metric, the status entries) is in
tests/server/test_policy_objects.py; the same on a real kube-apiserver, with a restart, in
tests/e2e/test_policy_isolation.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.install.registration import configurations
from webhook.kube.policyobjects import PolicyObject, policy_object
from webhook.policies.isolation import isolated_load, load_order

PACK = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: gpu-ceiling}
spec:
  match: {kinds: [Pod]}
  autogen: false
  params: {maxGpus: 8}
  validate: {expression: "gpuCount(podSpec) <= params.maxGpus", message: too many GPUs}
---
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: placement}
spec:
  match: {kinds: [Pod]}
  autogen: false
  mutate: [{requireNodeAffinity: {fromParam: gpuNode}}]
  params:
    gpuNode: {key: vendor.example/gpu, operator: In, values: ["true"]}
"""
GROUP_VERSION = "gpu-webhook.io/v1alpha1"


@pytest.fixture
def pack(tmp_path: Path) -> list[str]:
    (tmp_path / "pack.yaml").write_text(PACK)
    return [str(tmp_path)]


def gpupolicy(name: str, expression: str = "true", created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicy",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1, "creationTimestamp": created},
        "spec": {
            "match": {"kinds": ["Pod"]},
            "autogen": False,
            "validate": {"expression": expression, "message": f"{name} says no"},
        },
    }


def overlay(name: str, *rules: dict[str, Any], created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "GPUPolicyOverlay",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1, "creationTimestamp": created},
        "spec": {"rules": list(rules)},
    }


def objects(*raw: dict[str, Any]) -> list[PolicyObject]:
    return [policy_object(obj) for obj in sorted(raw, key=load_order)]


def rejected_labels(load: Any) -> list[str]:
    return sorted("/".join(part for part in key if part) for key in load.rejected)


def test_a_gpupolicy_that_does_not_compile_is_the_only_one_left_out(pack: list[str]) -> None:
    """An overlay that names the broken GPUPolicy and another rule keeps raising the other rule's ceiling."""
    load = isolated_load(
        pack,
        objects(
            gpupolicy("good", "!('deny-me' in object.metadata.labels)"),
            gpupolicy("broken", "object.metadata.name =="),
            overlay("site", {"name": "gpu-ceiling", "params": {"maxGpus": 16}}, {"name": "broken", "action": "Warn"}),
        ),
    )
    assert load.result.ruleset is not None
    assert rejected_labels(load) == ["GPUPolicy/broken"]
    ((key, errors),) = load.rejected.items()
    assert key == ("GPUPolicy", "", "broken")
    assert "spec.validate.expression: CEL" in errors[0].message and errors[0].location.file == "GPUPolicy/broken"
    rules = {rule.name: rule for rule in load.result.ruleset.rules}
    assert sorted(rules) == ["good", "gpu-ceiling", "placement"]
    assert rules["gpu-ceiling"].params["maxGpus"] == 16  # the site's ceiling, not the pack's 8
    assert sorted(o.label for o in load.loaded) == ["GPUPolicy/good", "GPUPolicyOverlay/site"]
    # everything; the GPUPolicies as written (broken, then without it); then the overlay on them
    assert load.rounds == 4


def test_an_overlay_that_breaks_a_file_rule_is_left_out_not_the_rule(pack: list[str]) -> None:
    load = isolated_load(
        pack,
        objects(
            overlay("raise", {"name": "gpu-ceiling", "params": {"maxGpus": 16}}),
            overlay("bad-placement", {"name": "placement", "params": {"gpuNode": {"operator": "In"}}}),
        ),
    )
    assert load.result.ruleset is not None
    assert rejected_labels(load) == ["GPUPolicyOverlay/bad-placement"]
    (error,) = load.rejected[("GPUPolicyOverlay", "", "bad-placement")]
    assert error.location.file == "GPUPolicyOverlay/bad-placement" and error.rule == "placement"
    assert "requireNodeAffinity: params.gpuNode" in error.message
    rules = {rule.name: rule for rule in load.result.ruleset.rules}
    assert rules["placement"].params["gpuNode"]["key"] == "vendor.example/gpu"  # the pack's value serves
    assert rules["gpu-ceiling"].params["maxGpus"] == 16


def test_of_two_overlays_setting_one_field_the_newer_is_left_out(pack: list[str]) -> None:
    """Whatever order the cache lists them in: creationTimestamp decides, then the name."""
    older = overlay("zz-older", {"name": "gpu-ceiling", "params": {"maxGpus": 16}}, created="2026-01-01T00:00:00Z")
    newer = overlay("aa-newer", {"name": "gpu-ceiling", "params": {"maxGpus": 4}}, created="2026-02-01T00:00:00Z")
    for listed in ((older, newer), (newer, older)):
        load = isolated_load(pack, objects(*listed))
        assert load.result.ruleset is not None
        assert rejected_labels(load) == ["GPUPolicyOverlay/aa-newer"]
        assert (
            "params.maxGpus also set by GPUPolicyOverlay zz-older"
            in load.rejected[("GPUPolicyOverlay", "", "aa-newer")][0].message
        )
        assert {r.name: r for r in load.result.ruleset.rules}["gpu-ceiling"].params["maxGpus"] == 16


def test_a_name_a_rule_file_has_is_the_objects_problem_never_the_files(pack: list[str]) -> None:
    load = isolated_load(pack, objects(gpupolicy("gpu-ceiling", "false"), gpupolicy("other")))
    assert load.result.ruleset is not None
    assert rejected_labels(load) == ["GPUPolicy/gpu-ceiling"]
    assert "duplicate rule name" in load.rejected[("GPUPolicy", "", "gpu-ceiling")][0].message
    rules = {rule.name: rule for rule in load.result.ruleset.rules}
    assert rules["gpu-ceiling"].source.file.endswith("pack.yaml") and "other" in rules


def test_broken_objects_are_found_together_not_one_load_each(pack: list[str]) -> None:
    broken = [gpupolicy(f"broken-{i}", "object.metadata.name ==") for i in range(5)]
    # an overlay broken only by its target: it names a param the pack's rule does not have
    wrong_param = overlay("wrong-param", {"name": "gpu-ceiling", "params": {"maxGPUs": 16}})
    load = isolated_load(pack, objects(*broken, gpupolicy("fine"), wrong_param))
    assert load.result.ruleset is not None
    assert rejected_labels(load) == [*(f"GPUPolicy/broken-{i}" for i in range(5)), "GPUPolicyOverlay/wrong-param"]
    assert [o.label for o in load.loaded] == ["GPUPolicy/fine"]
    # the errors of every object broken on its own come in one load: all at once, then without the six
    # it names. Not one load per object.
    assert load.rounds == 2


def test_a_broken_rule_file_fails_the_load_and_still_names_the_broken_objects(pack: list[str]) -> None:
    Path(pack[0], "site.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: site}\n"
        "spec: {match: {kinds: [Pod]}, validate: {expression: 'object ==', message: m}}\n"
    )
    load = isolated_load(pack, objects(gpupolicy("broken", "object.metadata.name =="), gpupolicy("fine")))
    assert load.result.ruleset is None  # the caller keeps its last good rule set
    assert any(e.location.file.endswith("site.yaml") for e in load.result.errors)
    assert rejected_labels(load) == ["GPUPolicy/broken"]


def test_without_objects_it_is_the_plain_load(pack: list[str]) -> None:
    load = isolated_load(pack, [])
    assert load.result.ruleset is not None and load.rejected == {} and load.rounds == 1


def test_the_registration_is_what_the_loaded_objects_need_a_broken_sibling_never_shrinks_it(pack: list[str]) -> None:
    """The webhook configurations derive from the loaded rules: a GPUPolicy on ConfigMaps beside a broken
    one gets exactly the registration it gets alone."""
    config_maps = {"kind": "ConfigMap", "group": "", "version": "v1", "resource": "configmaps"}
    good = gpupolicy("config-maps", "true")
    good["spec"]["match"]["kinds"] = [config_maps]
    broken = gpupolicy("broken", "object.metadata.name ==")
    broken["spec"]["match"]["kinds"] = [{**config_maps, "kind": "Secret", "resource": "secrets"}]
    beside = isolated_load(pack, objects(good, broken)).result.ruleset
    alone = isolated_load(pack, objects(good)).result.ruleset
    assert beside is not None and alone is not None
    assert configurations(beside) == configurations(alone)
    resources = {
        r for c in configurations(beside) for w in c["webhooks"] for rule in w["rules"] for r in rule["resources"]
    }
    assert "configmaps" in resources and "secrets" not in resources and "pods" in resources


def test_an_overlay_broken_only_with_a_files_exception_is_found_by_trying_each_overlay_alone(pack: list[str]) -> None:
    """exceptable: false on a rule a file's GPUPolicyException names: the error is at the exception, in a
    file, and names no overlay; the rules load without the overlays, so one of them is to blame."""
    Path(pack[0], "exceptions.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicyException\n"
        "metadata: {name: legacy, namespace: team-a}\nspec: {rules: [gpu-ceiling], reason: legacy nodes}\n"
    )
    load = isolated_load(
        pack,
        objects(
            overlay("raise", {"name": "gpu-ceiling", "params": {"maxGpus": 16}}, created="2026-01-01T00:00:00Z"),
            overlay("lock", {"name": "gpu-ceiling", "exceptable": False}, created="2026-02-01T00:00:00Z"),
        ),
    )
    assert load.result.ruleset is not None
    assert rejected_labels(load) == ["GPUPolicyOverlay/lock"]
    (error,) = load.rejected[("GPUPolicyOverlay", "", "lock")]
    assert error.location.file == "GPUPolicyOverlay/lock" and error.message.startswith("with this overlay: ")
    assert "exceptions.yaml" in error.message
    assert {r.name: r for r in load.result.ruleset.rules}["gpu-ceiling"].params["maxGpus"] == 16


def test_a_new_generation_that_does_not_load_leaves_the_previous_one_running(pack: list[str]) -> None:
    first = isolated_load(pack, objects(gpupolicy("site", "!('deny-me' in object.metadata.labels)")))
    assert first.result.ruleset is not None
    previous = {o.key: o for o in first.loaded}
    broken = gpupolicy("site", "object.metadata.name ==")
    broken["metadata"]["generation"] = 2
    load = isolated_load(pack, objects(broken, gpupolicy("other")), previous)
    assert load.result.ruleset is not None
    assert rejected_labels(load) == ["GPUPolicy/site"]  # the new generation stays reported
    assert [(o.label, o.generation) for o in load.kept] == [("GPUPolicy/site", 1)]
    assert sorted((o.label, o.generation) for o in load.loaded) == [("GPUPolicy/other", 1), ("GPUPolicy/site", 1)]
    rules = {rule.name: rule for rule in load.result.ruleset.rules}
    assert "site" in rules and "other" in rules
    # another object (a new uid under the same name: deleted and created again) gets no previous version
    recreated = {**broken, "metadata": {**broken["metadata"], "uid": "another-uid"}}
    assert isolated_load(pack, objects(recreated), previous).kept == []
    # and a restart has none to keep
    assert isolated_load(pack, objects(broken)).kept == []
