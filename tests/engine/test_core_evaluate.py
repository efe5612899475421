"""evaluate(): match clauses, actions, failure policies and mutation semantics, on small rule sets."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.support import cpu_pod, gpu_pod
from webhook.engine import AdmissionInput, Mode, Phase, evaluate, load_rules
from webhook.engine.ruleset import RuleSet


def ruleset(tmp_path: Path, *rules: str) -> RuleSet:
    text = "\n---\n".join(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\n" + textwrap.dedent(rule).strip() for rule in rules
    )
    (tmp_path / "rules.yaml").write_text(text)
    result = load_rules(tmp_path)
    assert result.ruleset is not None, [str(e) for e in result.errors]
    return result.ruleset


def deny(name: str, expression: str, **spec: Any) -> str:
    spec.setdefault("match", "{kinds: [Pod]}")
    extra = "".join(f"\n      {key}: {value}" for key, value in spec.items())
    return f"""
    metadata: {{name: {name}}}
    spec:
      validate: {{expression: "{expression}", message: "{name} says no"}}{extra}
    """


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def test_failure_policy_fail_denies_and_ignore_allows_but_records(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path,
        deny("strict", "object.spec.nope == 1", failurePolicy="Fail"),
        deny("lenient", "object.spec.nope == 1", failurePolicy="Ignore"),
    )
    decision = evaluate(rules, AdmissionInput(object=cpu_pod(), namespace="a"))
    assert [v.rule for v in decision.violations] == ["strict"]
    assert "rule strict could not be evaluated" in decision.violations[0].message
    assert "nope" in decision.violations[0].message
    assert len(decision.errors) == 2 and decision.errors[1].rule == "lenient"


def test_warn_and_audit_actions_and_audit_mode(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path,
        deny("d", "false"),
        deny("w", "false", action="Warn"),
        deny("a", "false", action="Audit"),
    )
    decision = evaluate(rules, AdmissionInput(object=cpu_pod()))
    assert (
        [v.rule for v in decision.violations],
        [v.rule for v in decision.warnings],
        [v.rule for v in decision.audits],
    ) == (
        ["d"],
        ["w"],
        ["a"],
    )
    assert not decision.allowed
    relaxed = evaluate(rules, AdmissionInput(object=cpu_pod()), mode=Mode.AUDIT)
    assert (
        relaxed.allowed
        and [v.rule for v in relaxed.audits] == ["d", "a"]
        and [v.rule for v in relaxed.warnings] == ["w"]
    )


def test_namespaces_include_exclude_and_selector(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path,
        deny("only-tenants", "false", match="{kinds: [Pod], namespaceSelector: {matchLabels: {tenant: 'true'}}}"),
        deny("not-system", "false", match="{kinds: [Pod], namespaces: {exclude: [kube-system]}}"),
        deny("only-a", "false", match="{kinds: [Pod], namespaces: {include: [a]}}"),
    )

    def denied(ns: str, ns_object: dict | None) -> list[str]:
        return [
            v.rule
            for v in evaluate(
                rules, AdmissionInput(object=cpu_pod(), namespace=ns, namespace_object=ns_object)
            ).violations
        ]

    assert denied("a", namespace("a", tenant="true")) == ["only-tenants", "not-system", "only-a"]
    assert denied("b", namespace("b")) == ["not-system"]
    assert denied("kube-system", namespace("kube-system")) == []


def test_missing_namespace_context_follows_on_missing_context(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path,
        deny("needs-ns-allow", "namespaceObject.metadata.name == 'x'"),
        deny("needs-ns-deny", "namespaceObject.metadata.name == 'x'", onMissingContext="Deny"),
    )
    decision = evaluate(rules, AdmissionInput(object=cpu_pod(), namespace="team-a", namespace_object=None))
    assert [v.rule for v in decision.violations] == ["needs-ns-deny"]
    assert "not known yet" in decision.violations[0].message
    reasons = {t.rule: t.reason for t in decision.trace}
    assert reasons["needs-ns-allow"] == "not evaluated: no namespace context"


def test_on_missing_context_evaluate_runs_the_rule_with_a_null_namespace(tmp_path: Path) -> None:
    """Evaluate: the CEL decides with namespaceObject null; a rule that reads the namespace only to
    narrow an exemption denies as strictly as in a namespace it does not exempt."""
    rules = ruleset(
        tmp_path,
        deny(
            "exempt-in-platform",
            "namespaceObject != null && namespaceObject.metadata.name == 'platform'",
            onMissingContext="Evaluate",
        ),
    )
    unknown = evaluate(rules, AdmissionInput(object=cpu_pod(), namespace="team-a", namespace_object=None))
    assert [v.rule for v in unknown.violations] == ["exempt-in-platform"]
    assert "not known yet" not in unknown.violations[0].message
    platform = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platform"}}
    assert evaluate(rules, AdmissionInput(object=cpu_pod(), namespace="platform", namespace_object=platform)).allowed


def test_missing_context_refuses_once_for_a_rule_that_mutates_and_validates(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path,
        """
        metadata: {name: both}
        spec:
          onMissingContext: Deny
          match: {kinds: [Pod], namespaceSelector: {matchLabels: {tenant: 'true'}}}
          mutate: [{setLabels: {values: {a: b}}}]
          validate: {expression: 'true'}
        """,
    )
    decision = evaluate(rules, AdmissionInput(object=cpu_pod(), namespace="team-a"))
    assert len(decision.violations) == 1 and decision.patch == []


def test_offline_request_variable_matches_what_the_apiserver_sends(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path, deny("req", "request.operation == 'CREATE' && request.kind.kind == 'Pod' && request.namespace == 'a'")
    )
    assert evaluate(rules, AdmissionInput(object=cpu_pod(), namespace="a")).allowed


def test_object_selector_matches_new_or_old_object(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path,
        deny(
            "sel",
            "false",
            match="{kinds: [Pod], operations: [UPDATE], objectSelector: {matchLabels: {team: ml}}}",
            ratcheting="false",  # the old object fails as well: this test is about the selector
        ),
    )
    old = cpu_pod()
    old["metadata"]["labels"] = {"team": "ml"}
    new = cpu_pod()
    assert not evaluate(rules, AdmissionInput(object=new, old_object=old, operation="UPDATE")).allowed
    assert evaluate(rules, AdmissionInput(object=new, old_object=cpu_pod(), operation="UPDATE")).allowed
    assert evaluate(rules, AdmissionInput(object=new, old_object=old, operation="CREATE")).allowed  # not indexed


def test_delete_sees_old_object_and_mutations_do_not_run(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path,
        deny("no-delete-gpu", "gpuCount(podSpec) == 0", match="{kinds: [Pod], operations: [DELETE]}"),
        """
        metadata: {name: label}
        spec:
          match: {kinds: [Pod], operations: ['*']}
          mutate: [{setLabels: {values: {a: b}}}]
        """,
    )
    decision = evaluate(rules, AdmissionInput(object=None, old_object=gpu_pod(), operation="DELETE"))
    assert [v.rule for v in decision.violations] == ["no-delete-gpu"] and decision.patch == []


def test_gpu_match_and_list_results_name_each_failure(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path,
        """
        metadata: {name: names}
        spec:
          match: {kinds: [Pod], gpu: true}
          validate: {expression: "containers.map(c, target + ': ' + c.name)"}
        """,
    )
    assert evaluate(rules, AdmissionInput(object=cpu_pod())).allowed
    decision = evaluate(rules, AdmissionInput(object=gpu_pod("x")))
    assert [v.message for v in decision.violations] == ["pod x: trainer"]


def test_wrong_result_type_is_a_rule_error(tmp_path: Path) -> None:
    # dyn-typed, so it passes the load-time type check and gives a string at run time
    rules = ruleset(tmp_path, deny("typed", "object.metadata.name"))
    decision = evaluate(rules, AdmissionInput(object=cpu_pod()))
    assert "gave str, expected bool or list" in decision.violations[0].message


def test_wildcard_kind_rules_join_every_index_entry_in_file_order(tmp_path: Path) -> None:
    rules = ruleset(
        tmp_path,
        deny("first-pod", "false"),
        deny("any-kind", "false", match="{kinds: ['*']}"),
        deny("last-pod", "false"),
    )
    assert [r.name for r in rules.candidates("Pod", "CREATE")] == ["first-pod", "any-kind", "last-pod"]
    assert [r.name for r in rules.candidates("ConfigMap", "CREATE")] == ["any-kind"]
    assert rules.candidates("Pod", "DELETE") == ()


def test_subresource_requests_are_not_evaluated(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, deny("all", "false", match="{kinds: ['*'], operations: ['*']}"))
    assert evaluate(rules, AdmissionInput(object=cpu_pod(), sub_resource="status")).allowed


MUTATIONS = """
metadata: {name: everything}
spec:
  match: {kinds: [Pod, Job]}
  mutate:
    - setPriorityClassName: {value: gpu-batch}
    - setSchedulerName: {value: gang-scheduler}
    - addEnv: {name: NVIDIA_VISIBLE_DEVICES, value: void, containers: nonGpu}
    - setAnnotations: {values: {prometheus.io/scrape: "true"}, valueExpressions: {owner: "request.userInfo.username"}}
    - merge: {spec: {securityContext: {runAsNonRoot: true}}}
"""


def apply_twice(rules: RuleSet, obj: dict[str, Any], **kwargs: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    first = evaluate(rules, AdmissionInput(object=obj, **kwargs), phase=Phase.MUTATE)
    patched = jsonpatch.apply_patch(obj, first.patch)
    assert patched == (first.mutated if first.patch else obj)
    second = evaluate(rules, AdmissionInput(object=patched, **kwargs), phase=Phase.MUTATE)
    assert second.patch == [], "mutations must be idempotent"
    return patched, first.patch


def test_pod_mutations_priority_removes_resolved_priority(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, MUTATIONS)
    pod = gpu_pod(priority=0)
    pod["spec"]["containers"].append({"name": "helper", "image": "busybox", "env": [{"name": "X", "value": "1"}]})
    patched, patch = apply_twice(rules, pod, request={"userInfo": {"username": "alice"}})
    assert {"op": "remove", "path": "/spec/priority"} in patch
    assert patched["spec"]["priorityClassName"] == "gpu-batch" and "priority" not in patched["spec"]
    assert patched["spec"]["schedulerName"] == "gang-scheduler"
    assert "env" not in patched["spec"]["containers"][0]  # the GPU container keeps its GPUs visible
    assert patched["spec"]["containers"][1]["env"] == [
        {"name": "X", "value": "1"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    ]
    assert patched["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "owner": "alice"}
    assert patched["spec"]["securityContext"] == {"runAsNonRoot": True}


def test_existing_values_win_unless_override(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, MUTATIONS)
    pod = gpu_pod(priorityClassName="user-choice", securityContext={"runAsNonRoot": False})
    patched, _ = apply_twice(rules, pod, request={})
    assert patched["spec"]["priorityClassName"] == "user-choice"
    assert patched["spec"]["securityContext"] == {"runAsNonRoot": False}
    assert "owner" not in patched["metadata"]["annotations"]  # expression had nothing to give: skipped


def job(**spec: Any) -> dict[str, Any]:
    template = gpu_pod()
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {"template": {"metadata": {}, "spec": template["spec"]}, **spec},
    }


def test_template_priority_is_set_without_touching_priority(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, MUTATIONS)
    patched, patch = apply_twice(rules, job(), request={})
    assert patched["spec"]["template"]["spec"]["priorityClassName"] == "gpu-batch"
    assert all(op["op"] != "remove" for op in patch)
    assert patched["metadata"]["annotations"]["prometheus.io/scrape"] == "true"  # Job listed directly: top-level


QUEUE = """
metadata: {name: queue}
spec:
  match: {kinds: [Job, PyTorchJob], operations: [CREATE, UPDATE]}
  mutate:
    - setQueueName: {valueExpression: "has(namespaceObject.metadata.annotations) ? namespaceObject.metadata.annotations['gpu-webhook.io/queue'] : ''"}
"""


def test_queue_label_suspends_a_batch_job_only_at_create(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, QUEUE)
    ns = namespace("team-a")
    ns["metadata"]["annotations"] = {"gpu-webhook.io/queue": "team-a-queue"}
    kwargs = {"namespace": "team-a", "namespace_object": ns}
    _, patch = apply_twice(rules, job(), **kwargs)
    assert patch == [
        {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "team-a-queue"}},
        {"op": "add", "path": "/spec/suspend", "value": True},
    ]
    running = job(suspend=False)
    update = evaluate(
        rules, AdmissionInput(object=running, old_object=copy.deepcopy(running), operation="UPDATE", **kwargs)
    )
    assert update.patch == []  # Kueue makes the label immutable on a running job
    ns["metadata"]["annotations"]["gpu-webhook.io/queue"] = "Not A DNS Name"
    bad = evaluate(rules, AdmissionInput(object=job(), **kwargs))
    assert not bad.allowed and "not a DNS-1123 subdomain" in bad.violations[0].message


@pytest.mark.parametrize(
    ("existing", "added"),
    [
        ([], True),
        ([{"key": "nvidia.com/gpu", "operator": "Exists"}], False),  # covers every effect
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], False),
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], True),  # other effect
        ([{"operator": "Exists"}], False),  # tolerates everything
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}], True),  # value-specific
        ([{"key": "other", "operator": "Exists"}], True),
    ],
)
def test_toleration_equivalence(tmp_path: Path, existing: list, added: bool) -> None:
    rules = ruleset(
        tmp_path,
        """
        metadata: {name: tol}
        spec:
          match: {kinds: [Pod]}
          mutate: [{addToleration: {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
        """,
    )
    patched, patch = apply_twice(rules, gpu_pod(tolerations=copy.deepcopy(existing)))
    assert bool(patch) is added
    assert patched["spec"]["tolerations"][: len(existing)] == existing
