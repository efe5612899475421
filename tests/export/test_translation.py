"""The pieces of an export: the CEL rewrite, the per-kind targets, the cost bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.export.apiserver import Apiserver
from tests.export.equivalence import compare, wrap
from tests.export.native_site import not_exceptable
from tests.support import gpu_pod, load_rule_text
from webhook.engine import AdmissionInput, RuleSet, load_rules
from webhook.engine.resources import DEFAULT
from webhook.engine.workloads import WORKLOADS, pod_template_targets
from webhook.export import export
from webhook.export.celenv import NativeEnvironment
from webhook.export.cost import PER_CALL_LIMIT, POLICY_BUDGET, estimate
from webhook.export.nativecel import NotNative, Translator, native_literal
from webhook.export.policies import COST_ANNOTATION
from webhook.export.targets import KindTarget, api_of, targets_expression

ENV = NativeEnvironment()
TRANSLATOR = Translator(DEFAULT)


def run(expression: str, **variables: object) -> object:
    return ENV.evaluate(ENV.compile(expression), dict(variables))


def test_helpers_become_the_apiservers_cel() -> None:
    text = TRANSLATOR.translate("quantity(string(c.x)) == quantity('1Gi') && isAccelerator(r) && params.a")
    assert "quantity(string(string(c.x))).asApproximateFloat()" in text  # a Quantity, not a number, in Kubernetes
    assert "1073741824.0" in text  # literals folded as the engine folds them
    assert "r.startsWith('nvidia.com/mig-')" in text and "variables.params.a" in text
    assert (
        TRANSLATOR.translate("containers.map(c, target + c.name)") == "gwT.containers.map(c, gwT.description + c.name)"
    )
    assert TRANSLATOR.translate("'podSpec' + x.target") == "'podSpec' + x.target"  # strings and fields untouched
    # CEL's leading dot names the global helper: translated like the plain call
    assert TRANSLATOR.translate(".quantity(c.x) > 1.0") == "quantity(string(c.x)).asApproximateFloat() > 1.0"


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("cel.bind(x, 1, [1].all(x, x > 0))", "shadowed by a comprehension variable"),
        ("object.spec.containers.all(target, true)", "comprehension variable is named target"),
    ],
)
def test_what_the_apiserver_cannot_run_is_refused(expression: str, reason: str) -> None:
    with pytest.raises(NotNative, match=reason):
        TRANSLATOR.translate(expression)


def test_cel_bind_is_inlined_for_the_apiserver() -> None:
    """The apiserver's CEL has no bindings extension: the bound value is substituted, fields untouched."""
    text = TRANSLATOR.translate("cel.bind(n, object.a + 1, cel.bind(m, n * 2, m + n + object.n))")
    assert "cel.bind" not in text
    assert run(text, object={"a": 1, "n": 10}) == 4 + 2 + 10


def test_params_literals_are_homogeneous_for_the_apiserver() -> None:
    literal = native_literal({"a": 1, "b": ["x", 2], "c": {"d": None}})
    assert literal == "{'a': dyn(1), 'b': dyn([dyn('x'), dyn(2)]), 'c': dyn({'d': dyn(null)})}"
    assert run(literal) == {"a": 1, "b": ["x", 2], "c": {"d": None}}


def test_pod_gpu_count_matches_the_engine() -> None:
    spec = gpu_pod(gpus=2)["spec"]
    spec["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}},
        {"name": "setup", "resources": {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}},
        {"name": "bad", "resources": {"limits": {"nvidia.com/gpu": "500m"}}},
    ]
    # the scheduler: "setup" runs beside the sidecar started before it (4 + 1), KEP-753
    assert run(TRANSLATOR.pod_gpus("object"), object=spec) == DEFAULT.pod_count(spec) == 5


@pytest.mark.parametrize("kind", sorted(WORKLOADS))
def test_targets_are_the_engines_pod_templates(kind: str) -> None:
    """Every kind of the engine's workload table: same templates, same descriptions."""
    obj = wrap(gpu_pod(), kind) if kind in ("JobSet", "PyTorchJob", "RayJob", "LeaderWorkerSet") else None
    if obj is None:
        obj = wrap(gpu_pod(), "Deployment")
        obj["kind"] = kind
        obj["apiVersion"] = f"{api_of(kind)[0]}/v1"
        if kind == "CronJob":
            obj["spec"] = {"jobTemplate": {"spec": obj["spec"]}}
        elif kind in ("TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob"):
            obj = wrap(gpu_pod(), "PyTorchJob")
            obj["kind"] = kind
            field = {
                "TFJob": "tfReplicaSpecs",
                "MPIJob": "mpiReplicaSpecs",
                "XGBoostJob": "xgbReplicaSpecs",
                "JAXJob": "jaxReplicaSpecs",
            }
            obj["spec"] = {field.get(kind, "paddleReplicaSpecs"): obj["spec"]["pytorchReplicaSpecs"]}
        elif kind == "RayCluster":
            obj = wrap(gpu_pod(), "RayJob")
            obj["kind"], obj["spec"] = kind, obj["spec"]["rayClusterSpec"]
    group, _ = api_of(kind)
    expression = targets_expression([KindTarget(kind, group, "x", templates=True)], {"gpus"}, TRANSLATOR, True)
    native = run(expression, object=obj)
    engine = pod_template_targets(obj)
    assert engine, kind
    assert sorted(t["description"] for t in native) == sorted(t.description for t in engine)
    assert all(t["gpus"] == 1 for t in native)
    pointers = {t["path"] for t in native}
    assert pointers == {"/" + "/".join(map(str, t.root)) for t in engine}


def test_cost_bound_multiplies_loops_and_takes_one_branch() -> None:
    one = estimate("x.containers.all(c, c.a == 1)")
    assert estimate("x.containers.all(c, c.env.all(e, e.a == 1))") > 8 * one
    assert estimate("p ? x.containers.all(c, c.a == 1) : false") < 2 * one
    assert estimate("[1, 2].all(v, v > 0)") < estimate("x.volumes.all(v, v > 0)")


def test_exported_policies_stay_within_the_apiservers_budgets(pack: RuleSet) -> None:
    result = export(not_exceptable(pack))
    for document in result.objects:
        if document["kind"].endswith("Binding"):
            continue
        spec = document["spec"]
        expressions = [v["expression"] for v in spec.get("variables", [])]
        expressions += [
            v[k] for v in spec.get("validations", []) for k in ("expression", "messageExpression") if k in v
        ]
        expressions += [m["jsonPatch"]["expression"] for m in spec.get("mutations", [])]
        assert max(map(estimate, expressions)) <= PER_CALL_LIMIT
        assert int(document["metadata"]["annotations"][COST_ANNOTATION]) == sum(map(estimate, expressions))
        assert sum(map(estimate, expressions)) <= POLICY_BUDGET


def test_a_rule_over_the_cost_limit_is_refused(tmp_path: Path) -> None:
    rules = tmp_path / "rules"  # the rule alone: the cost check is per rule, the pack would only add time
    rules.mkdir()
    (rules / "quadratic.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: quadratic}\n"
        "spec:\n  match: {kinds: [Pod]}\n  validate:\n    expression: >-\n"
        "      !has(podSpec.volumes) || podSpec.volumes.all(v, podSpec.volumes.all(w,\n"
        "        podSpec.volumes.all(x, v.name != w.name || w.name != x.name || x.name == v.name)))\n"
    )
    refused = {r.rule: r.reason for r in export(load_rules(rules).require()).refused}
    assert "per-expression limit" in refused["quadratic"]


def test_a_leading_dot_exports_as_the_variable_it_names(tmp_path: Path) -> None:
    """CEL's leading dot (`.containers`: the variable from the root scope) reads the engine variable,
    so the export rewrites it as it rewrites `containers`: the policy decides as the engine does."""
    ruleset = load_rule_text(
        tmp_path,
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: leading-dot}\n"
        "spec:\n  exceptable: false\n  action: Deny\n  match: {kinds: [Pod, Deployment]}\n"
        "  params: {banned: [NVIDIA_VISIBLE_DEVICES]}\n"
        "  validate:\n"
        "    expression: >-\n"
        "      .containers.all(c, !has(c.env) || c.env.all(e, !(e.name in .params.banned)))\n"
        "    messageExpression: .target + ' sets a banned variable'\n",
    )
    exported = export(ruleset)
    assert exported.exported == ["leading-dot"], exported.refused
    bad = gpu_pod()
    bad["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    server = Apiserver()
    seen = []
    for name, obj in [("good", gpu_pod()), ("bad", bad), ("bad deployment", wrap(bad, "Deployment"))]:
        for comparison in compare(ruleset, exported, server, name, AdmissionInput.offline(obj)):
            assert comparison.same, comparison
            seen.append(comparison.engine[0])
    assert seen == ["pass", "deny", "deny"]


POD_METADATA_RULE = (
    "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: team-label}\n"
    "spec:\n  exceptable: false\n  action: Deny\n  match: {kinds: [%s]}\n"
    "  validate:\n"
    "    expression: \"podMetadata != null && has(podMetadata.labels) && 'team' in podMetadata.labels\"\n"
    "    messageExpression: target + ' has no team label'\n"
)


def test_pod_metadata_exports_as_the_metadata_beside_each_pod_spec(tmp_path: Path) -> None:
    """podMetadata is the Pod's metadata, or each template's (autogen): the policy reads the same."""
    ruleset = load_rule_text(tmp_path, POD_METADATA_RULE % "Pod")
    exported = export(ruleset)
    assert exported.exported == ["team-label"], exported.refused
    labelled = gpu_pod()
    labelled["metadata"]["labels"] = {"team": "a"}
    # the workload carries the label, its pods do not: both deny
    workload_only = wrap(gpu_pod(), "Deployment")
    workload_only["metadata"]["labels"] = {"team": "a"}
    server = Apiserver()
    seen = []
    cases = [
        ("pod", labelled),
        ("unlabelled pod", gpu_pod()),
        ("deployment", wrap(labelled, "Deployment")),
        ("job", wrap(labelled, "Job")),
        ("unlabelled job", wrap(gpu_pod(), "Job")),
        ("labelled deployment, unlabelled pods", workload_only),
    ]
    for name, obj in cases:
        for comparison in compare(ruleset, exported, server, name, AdmissionInput.offline(obj)):
            assert comparison.same, comparison
            seen.append(comparison.engine[0])
    assert seen == ["pass", "deny", "pass", "pass", "deny", "deny"]


def test_pod_metadata_of_a_whole_workload_is_refused_with_what_to_do(tmp_path: Path) -> None:
    ruleset = load_rule_text(tmp_path, POD_METADATA_RULE % "Pod, Deployment")
    refused = {r.rule: r.reason for r in export(ruleset).refused}
    assert "leave those kinds to autogen" in refused["team-label"]
