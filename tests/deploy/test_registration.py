"""The registration derived from rules (webhook/install/registration.py): what each rule makes the apiserver send.

The pack's registration is checked in test_workload_table.py and, against a real kube-apiserver, in
tests/e2e; these tests cover what site rules can say that the pack does not.
"""

from __future__ import annotations

from pathlib import Path

from cel_expr_python import cel

from tests.support import load_rule_text
from webhook.authoring.lint import lint
from webhook.install.registration import (
    ENTRIES,
    INPUTS_CHANGED,
    REQUESTS_ACCELERATORS,
    entry_fields,
    entry_rules,
    tenant_reach,
)

MUTATE, MUTATE_TENANTS, VALIDATE, POLICIES = ENTRIES


def rule(name: str, match: str, body: str = "validate: {expression: 'true', message: 'no'}") -> str:
    return f"""apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  match: {match}
  {body}
"""


def sent(fields: dict) -> set[tuple[str, str, str, str]]:
    return {
        (group, resource, operation, r["scope"])
        for r in fields["rules"]
        for group in r["apiGroups"]
        for resource in r["resources"]
        for operation in r["operations"]
    }


def condition(fields: dict, name: str) -> str | None:
    found = [c["expression"] for c in fields.get("matchConditions", []) if c["name"] == name]
    return found[0] if found else None


def test_a_declared_kind_is_registered_with_its_api_and_an_undeclared_one_is_a_lint_error(tmp_path: Path) -> None:
    declared = rule("services", "{kinds: [{kind: Service, group: '', version: v1, resource: services}]}")
    ruleset = load_rule_text(tmp_path / "ok", declared)
    assert sent(entry_fields(ruleset, VALIDATE)) == {
        ("", "services", "CREATE", "*"),
        ("", "services", "UPDATE", "*"),
    }
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "rules.yaml").write_text(rule("services", "{kinds: [Service]}"))
    (error,) = lint([tmp_path / "bad"])
    assert "spec.match.kinds[0]: Service cannot be enforced" in error.message
    assert "kinds: [{kind: Service, group:" in error.message
    assert (error.location.line, error.location.column) == (5, 19)  # at `Service`


def test_operations_and_subresources_follow_the_rules(tmp_path: Path) -> None:
    ruleset = load_rule_text(
        tmp_path,
        rule("creates", "{kinds: [Job], operations: [CREATE]}"),
        rule(
            "pods", "{kinds: [Pod], operations: [UPDATE, DELETE]}", "autogen: false\n  validate: {expression: 'true'}"
        ),
    )
    assert sent(entry_fields(ruleset, VALIDATE)) == {
        ("batch", "jobs", "CREATE", "Namespaced"),
        ("", "pods", "UPDATE", "Namespaced"),
        ("", "pods", "DELETE", "Namespaced"),
        # kubectl debug adds containers through this subresource, an UPDATE of the whole Pod
        ("", "pods/ephemeralcontainers", "UPDATE", "Namespaced"),
    }
    # no mutating rule: the mutating entries are never called
    assert entry_fields(ruleset, MUTATE) == {"rules": []}


def test_autogen_reaches_the_workload_kinds_and_the_mutating_entries_leave_replicasets_out(tmp_path: Path) -> None:
    mutation = "mutate: [{setLabels: {values: {a: b}}}]"
    ruleset = load_rule_text(tmp_path, rule("label", "{kinds: [Pod]}", mutation))
    resources = {resource for _, resource, _, _ in sent(entry_fields(ruleset, MUTATE))}
    assert {"pods", "deployments", "jobs", "jobsets", "pytorchjobs", "rayjobs", "leaderworkersets"} <= resources
    assert "replicasets" not in resources  # a Deployment's controller would replace a mutated one forever


def test_the_tenant_label_splits_the_mutating_entries(tmp_path: Path) -> None:
    mutation = "mutate: [{setLabels: {values: {a: b}}}]"
    ruleset = load_rule_text(
        tmp_path,
        rule("tenants", "{kinds: [Pod], namespaceSelector: {matchLabels: {gpu-webhook.io/tenant: 'true'}}}", mutation),
        rule(
            "others",
            "{kinds: [Job], namespaceSelector: {matchExpressions: [{key: gpu-webhook.io/tenant, operator: DoesNotExist}]}}",
            mutation,
        ),
        rule("anywhere", "{kinds: [CronJob], namespaceSelector: {matchLabels: {team: a}}}", mutation),
        rule(
            "nowhere",
            "{kinds: [Deployment], namespaceSelector: {matchExpressions: "
            "[{key: team, operator: In, values: [a]}, {key: team, operator: NotIn, values: [a]}]}}",
            mutation,
        ),
    )
    reach = {r.name: tenant_reach(r) for r in ruleset.rules}
    assert (reach["tenants"], reach["others"], reach["anywhere"]) == (True, False, None)
    assert [r.name for r in entry_rules(ruleset, MUTATE)] == ["others", "anywhere"]
    assert [r.name for r in entry_rules(ruleset, MUTATE_TENANTS)] == ["tenants", "anywhere"]


def evaluate(expression: str, obj: dict, old: dict | None, operation: str = "UPDATE") -> bool:
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")})
    result = env.compile(expression).eval(
        env.Activation({"object": obj, "oldObject": old, "request": {"operation": operation}})
    )
    assert result.type() == cel.Type.BOOL, result.value()
    return result.value()


def test_updates_are_sent_when_a_field_a_rule_reads_changes(tmp_path: Path) -> None:
    reads_annotations = rule(
        "annotated",
        "{kinds: [Pod]}",
        "validate: {expression: \"!has(object.metadata.annotations) || !('x' in object.metadata.annotations)\"}",
    )
    ruleset = load_rule_text(tmp_path, reads_annotations)
    expression = condition(entry_fields(ruleset, VALIDATE), INPUTS_CHANGED)
    assert expression is not None
    old = {"kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"containers": []}}
    annotated = {**old, "metadata": {**old["metadata"], "annotations": {"x": "1"}}}
    finalized = {**old, "metadata": {**old["metadata"], "finalizers": ["f"]}}
    assert evaluate(expression, annotated, old)  # annotations added: the rule reads them
    assert not evaluate(expression, finalized, old)  # nothing a rule reads
    assert evaluate(expression, finalized, None, "CREATE")


def test_a_rule_that_reads_the_whole_object_or_merges_anywhere_gets_every_update(tmp_path: Path) -> None:
    whole = rule("whole", "{kinds: [Pod]}", 'validate: {expression: "size(object) > 0"}')
    merge = rule("merge", "{kinds: [Pod]}", "mutate: [{merge: {metadata: {annotations: {a: b}}}}]")
    ruleset = load_rule_text(tmp_path, whole, merge)
    assert condition(entry_fields(ruleset, VALIDATE), INPUTS_CHANGED) is None
    assert condition(entry_fields(ruleset, MUTATE), INPUTS_CHANGED) is None


def test_the_accelerator_filter_needs_every_rule_of_the_entry_to_be_gpu_only(tmp_path: Path) -> None:
    mutation = "mutate: [{setLabels: {values: {a: b}}}]"
    gpu_only = load_rule_text(tmp_path / "a", rule("gpu", "{kinds: [Pod], gpu: true}", mutation))
    assert condition(entry_fields(gpu_only, MUTATE), REQUESTS_ACCELERATORS) is not None
    mixed = load_rule_text(
        tmp_path / "b", rule("gpu", "{kinds: [Pod], gpu: true}", mutation), rule("all", "{kinds: [Pod]}", mutation)
    )
    assert condition(entry_fields(mixed, MUTATE), REQUESTS_ACCELERATORS) is None
    deletes = load_rule_text(tmp_path / "c", rule("gpu", "{kinds: [Pod], gpu: true, operations: [DELETE]}", mutation))
    assert condition(entry_fields(deletes, MUTATE), REQUESTS_ACCELERATORS) is None  # object is null on DELETE


def test_the_accelerator_filter_reads_the_configured_accelerators(tmp_path: Path) -> None:
    config = """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUWebhookConfig
metadata: {name: site}
spec: {acceleratorResources: [example.com/npu, "vendor.example/tpu-*"]}
"""
    ruleset = load_rule_text(
        tmp_path, config, rule("gpu", "{kinds: [Pod], gpu: true}", "mutate: [{setLabels: {values: {a: b}}}]")
    )
    expression = condition(entry_fields(ruleset, MUTATE), REQUESTS_ACCELERATORS)
    assert expression is not None

    def pod(resource: str) -> dict:
        return {"kind": "Pod", "spec": {"containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}]}}

    assert evaluate(expression, pod("example.com/npu"), None, "CREATE")
    assert evaluate(expression, pod("vendor.example/tpu-v5"), None, "CREATE")
    assert not evaluate(expression, pod("nvidia.com/gpu"), None, "CREATE")
