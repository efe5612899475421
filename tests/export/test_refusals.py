"""What export does with kinds beyond the pod-template table, and what it tells the admin when it cannot.

A refusal keeps the rule in the webhook (nothing is lost), and its reason says what the admin can do
about it (or that there is nothing to do): never the name of an internal table or module.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.export.apiserver import Apiserver
from tests.export.equivalence import as_apiserver_sends, compare, engine_view, native_view, pack_with_extras
from tests.export.native_site import NO_ALLOCATORS, not_exceptable
from tests.support import RULES, gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, RuleSet, load_rules
from webhook.engine.resources import DEFAULT
from webhook.engine.workloads import pod_template_targets
from webhook.export import CLAIMS_MODES, Release, export
from webhook.export.nativecel import Translator
from webhook.export.policies import GATE_ANNOTATION
from webhook.export.targets import KindTarget, targets_expression

# what a reason offers: a change that exports the rule, an option of export, or nothing to do
ACTIONS = ("to export", "nothing to do", "--claims unresolved", "--target all", "please report", "--kubernetes-version")
INTERNAL = ("engine/", "workloads.py", "KINDS", ".py")


@pytest.mark.parametrize("claims", CLAIMS_MODES)
@pytest.mark.parametrize("target", ["all", "vap", "map"])
@pytest.mark.parametrize("version", ["1.31", "1.36"])
def test_every_refusal_says_what_the_admin_can_do(claims: str, target: str, version: str) -> None:
    result = export(pack_with_extras(), target, Release.parse(version), claims)
    for refusal in result.refused:
        assert not any(word in refusal.reason for word in INTERNAL), refusal
        assert any(action in refusal.reason for action in ACTIONS), refusal


RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  exceptable: false  # exported only when no exception can lift it (webhook.export.EXCEPTABLE)
  match:
    kinds: {kinds}
    operations: [CREATE]
  validate:
    expression: "{expression}"
    message: "{name} says no"
"""


def test_a_kind_outside_the_table_is_exported_with_the_api_the_rule_declares(tmp_path: Path) -> None:
    declared = "[{kind: Widget, group: example.com, version: v1, resource: widgets}]"
    ruleset = load_rule_text(tmp_path, RULE.format(name="widgets", kinds=declared, expression="object.spec.size < 10"))
    result = export(ruleset)
    assert result.exported == ["widgets"]
    policy = result.rules[0].validating
    assert policy is not None
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["example.com"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["widgets"]}
    ]
    server = Apiserver()
    for size, decision in ((3, "pass"), (30, "deny")):
        widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "a"}}
        admission = AdmissionInput.offline({**widget, "spec": {"size": size}})
        (comparison,) = compare(ruleset, result, server, "widget", admission)
        assert comparison.same and comparison.engine[0] == decision, comparison


def test_a_kind_nobody_declared_is_refused_with_how_to_declare_it(tmp_path: Path) -> None:
    ruleset = load_rule_text(tmp_path, RULE.format(name="gadgets", kinds="[Gadget]", expression="true"))
    (refusal,) = export(ruleset).refused
    assert "kind Gadget" in refusal.reason and "declare them in match.kinds" in refusal.reason


def test_an_appwrapper_is_exported_when_the_rule_reads_no_pod_spec(tmp_path: Path) -> None:
    """Its pod templates sit at paths each AppWrapper names (podSets[].path): a policy cannot follow
    them, but a rule on the object's own labels does not need them."""
    labels = "has(object.metadata.labels) && 'team' in object.metadata.labels"
    specs = "gpuCount(podSpec) == 0"
    ruleset = load_rule_text(
        tmp_path,
        RULE.format(name="labelled", kinds="[Job, AppWrapper]", expression=labels),
        RULE.format(name="cpu-only", kinds="[Job, AppWrapper]", expression=specs),
    )
    result = export(ruleset, claims="unresolved")
    assert result.exported == ["labelled"]
    (refusal,) = result.refused
    assert "AppWrapper" in refusal.reason and "take AppWrapper out of match.kinds" in refusal.reason
    wrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "aw", "namespace": "a"},
        "spec": {"components": [{"template": {"kind": "Job"}, "podSets": [{"path": "template.spec.template"}]}]},
    }
    for obj in (wrapper, {**wrapper, "metadata": {**wrapper["metadata"], "labels": {"team": "x"}}}):
        (comparison,) = compare(ruleset, result, Apiserver(), "aw", AdmissionInput.offline(obj))
        assert comparison.same, comparison


def test_objects_without_pod_templates_are_their_own_target(tmp_path: Path) -> None:
    """TrainJob, ResourceClaim: one target, the object, with no pod spec (workloads.object_target)."""
    rule = RULE.format(name="small", kinds="[TrainJob]", expression="gpuCount(podSpec) == 0 && target != ''")
    ruleset = load_rule_text(tmp_path, rule, NO_ALLOCATORS)
    result = export(ruleset, claims="unresolved")
    assert result.exported == ["small"]
    # with the shipped KAI Scheduler allocator, a counting rule stays with the webhook, saying why
    (refusal,) = export(load_rule_text(tmp_path / "kai", rule), claims="unresolved").refused
    assert "annotation-marked allocators (kai-scheduler" in refusal.reason and "enabled: false" in refusal.reason
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "a"},
    }
    (comparison,) = compare(ruleset, result, Apiserver(), "trainjob", AdmissionInput.offline(job))
    assert comparison.same and comparison.engine[0] == "pass", comparison


def test_rayservice_templates_are_the_engines() -> None:
    """RayService (autogen off: its RayCluster is admitted as itself) when a rule names it."""
    pod = gpu_pod()
    template = {"spec": pod["spec"]}
    obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "serve", "namespace": "a"},
        "spec": {
            "rayClusterConfig": {
                "headGroupSpec": {"template": copy.deepcopy(template)},
                "workerGroupSpecs": [{"groupName": "gpu", "template": template}],
            }
        },
    }
    expression = targets_expression(
        [KindTarget("RayService", "ray.io", "rayservices", templates=True)], {"gpus"}, Translator(DEFAULT), True
    )
    server = Apiserver()
    native = server.env.evaluate(server.env.compile(expression), {"object": obj})
    engine = pod_template_targets(obj)
    assert sorted(t["description"] for t in native) == sorted(t.description for t in engine)
    assert {t["path"] for t in native} == {"/" + "/".join(map(str, t.root)) for t in engine}


def test_replicasets_are_validated_never_mutated(tmp_path: Path) -> None:
    """The engine never mutates a ReplicaSet (its Deployment's controller would replace it forever):
    the MutatingAdmissionPolicies do not match replicasets, the validating ones do."""
    (tmp_path / "no-allocators.yaml").write_text(NO_ALLOCATORS)
    pack = not_exceptable(load_rules([RULES, tmp_path]).require())
    result = export(pack, claims="unresolved")
    mutating = [r.mutating for r in result.rules if r.mutating is not None]
    validating = [r.validating for r in result.rules if r.validating is not None]
    assert mutating and validating

    def resources(policy: dict) -> set[str]:
        return {r for rule in policy["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}

    assert not any("replicasets" in resources(p) for p in mutating)
    assert any("replicasets" in resources(p) for p in validating)


# -- UPDATE: a rule acts only when the update changed what it reads or writes (engine/ratcheting.py) --

LABELS = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: attribution}
spec:
  exceptable: false  # exported only when no exception can lift it (webhook.export.EXCEPTABLE)
  match:
    kinds: [Pod]
    operations: [CREATE, UPDATE]
  mutate:
    - setLabels: {override: true, valueExpressions: {team: "namespaceObject.metadata.labels['team']"}}
    - setLabels: {values: {attributed: "yes"}}
"""


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, None),  # a no-op UPDATE (a finalizer removed): nothing, although `attributed` is missing
        ({"team": "search"}, {"team": "llm", "attributed": "yes"}),  # every mutation acts, the later ones too
        ({"other": "1"}, {"team": "llm", "other": "1", "attributed": "yes"}),
    ],
)
def test_an_update_gets_the_engines_patch_or_none(tmp_path: Path, change: dict, expected: dict | None) -> None:
    """The policy decides on the object it received and writes the decision into an annotation its
    mutations read; the first mutation setting `team` back to its old value does not stop the second."""
    ruleset = load_rule_text(tmp_path, LABELS)
    result = export(ruleset)
    policy = result.rules[0].mutating
    assert policy is not None and GATE_ANNOTATION in str(policy["spec"]["mutations"][0])
    old = gpu_pod()
    old["metadata"]["labels"] = {"team": "llm"}
    new = copy.deepcopy(old)
    new["metadata"]["labels"].update(change)
    namespace = {"metadata": {"name": "team-a", "labels": {"team": "llm"}}}
    admission = as_apiserver_sends(
        AdmissionInput.offline(new, operation="UPDATE", old_object=old, namespace_object=namespace)
    )
    server = Apiserver()
    engine = engine_view(ruleset, "attribution", admission)
    native = native_view(server.admit(result.rules[0], admission))
    assert engine == native
    patched = native[2]
    assert (patched or new)["metadata"]["labels"] == (expected or new["metadata"]["labels"])
    assert GATE_ANNOTATION not in str(patched)  # the decision never outlives the policy call


@pytest.fixture(scope="module")
def pack() -> RuleSet:
    return not_exceptable(load_rules(RULES).require())
