"""The mutation registry (engine/mutate.MUTATIONS) is the one description of every mutation.

Each entry must be complete (a schema, examples that pass it), name itself (setLabels is not
setAnnotations), declare the CEL it holds exactly as its builder compiles it (lint reads the
declaration, the loader and evaluate the compiled result), change a sample object and leave
it alone the second time (reinvocationPolicy: IfNeeded), and have its row in
docs/authoring.md's mutation table naming every argument. A mutation added without any of
these fails here.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonpatch
import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.support import REPO, cpu_pod, gpu_pod
from webhook.engine import AdmissionInput, Phase, evaluate
from webhook.engine.cel import CelEnvironment, CompiledExpression
from webhook.engine.loader import compile_documents
from webhook.engine.mutate import MUTATIONS, MutationKind
from webhook.engine.resources import DEFAULT
from webhook.engine.schema import POLICY_SCHEMA
from webhook.kubeyaml import load_documents

EXAMPLES = [(kind, args) for kind in MUTATIONS.values() for args in kind.examples]
EXAMPLE_IDS = [f"{kind.name}-{i}" for kind in MUTATIONS.values() for i in range(len(kind.examples))]


def samples() -> list[dict[str, Any]]:
    """Objects every example is applied to: at least one of them must change."""
    shared = cpu_pod("shared", tolerations=[{"key": "other", "operator": "Exists"}])
    shared["spec"]["containers"].append(gpu_pod()["spec"]["containers"][0])
    shared["spec"]["containers"][1]["env"] = [{"name": "A", "value": "1"}]
    amd = gpu_pod("amd")
    amd["spec"]["containers"][0]["resources"] = {"limits": {"amd.com/gpu": "2"}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"}},
        "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": gpu_pod(gpus=2)["spec"]}},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {"template": {"spec": gpu_pod()["spec"]}},
    }
    return [gpu_pod(gpus=2, priority=0), cpu_pod(), shared, amd, deployment, job]


def rule_set(operations: list[dict[str, Any]]) -> Any:
    rule = {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": "GPUPolicy",
        "metadata": {"name": "example"},
        "spec": {"match": {"kinds": ["Pod", "Deployment", "Job"]}, "mutate": operations},
    }
    result = compile_documents(load_documents(yaml.safe_dump(rule), "example.yaml"))
    assert result.ok, [str(e) for e in result.errors]
    return result.require()


def test_the_rule_schema_offers_exactly_the_registry() -> None:
    mutate = POLICY_SCHEMA["properties"]["spec"]["properties"]["mutate"]["items"]["properties"]
    assert list(mutate) == list(MUTATIONS)
    for name, kind in MUTATIONS.items():
        assert mutate[name]["anyOf"][0] == kind.schema


@pytest.mark.parametrize("kind", MUTATIONS.values(), ids=list(MUTATIONS))
def test_every_mutation_has_a_schema_and_examples_that_pass_it(kind: MutationKind) -> None:
    assert kind.examples, f"{kind.name}: add an example to its MutationKind"
    Draft202012Validator.check_schema(kind.schema)
    assert kind.schema.get("type") == "object"
    validator = Draft202012Validator(kind.schema)
    for args in kind.examples:
        assert not [e.message for e in validator.iter_errors(args)], args
    # every CEL field the kind declares is exercised by an example (so the check below covers it)
    for cel_field in kind.cel_fields:
        assert any(
            MutationKind(kind.name, kind.schema, kind.build, kind.examples, (cel_field,)).cel_texts(args)
            for args in kind.examples
        ), f"{kind.name}: no example sets {'.'.join(cel_field)}"


@pytest.mark.parametrize(("kind", "args"), EXAMPLES, ids=EXAMPLE_IDS)
def test_a_mutation_names_itself_and_declares_the_cel_it_compiles(kind: MutationKind, args: Any) -> None:
    env = CelEnvironment(DEFAULT)
    compiled: list[CompiledExpression] = []

    def recording(text: str) -> CompiledExpression:
        compiled.append(env.compile(text))
        return compiled[-1]

    mutation = kind.build(args, recording)
    assert mutation.name == kind.name  # the name errors, traces and export use
    assert list(mutation.cel()) == compiled  # what the loader type-checks and evaluate reads
    assert [text for _, text in kind.cel_texts(args)] == [e.text for e in compiled]  # what lint checks


@pytest.mark.parametrize(("kind", "args"), EXAMPLES, ids=EXAMPLE_IDS)
def test_every_example_changes_a_sample_cleanly_and_only_once(kind: MutationKind, args: Any) -> None:
    rules = rule_set([{kind.name: copy.deepcopy(args)}])
    changed = []
    for obj in samples():
        first = evaluate(rules, AdmissionInput.offline(obj, namespace="team-a"), Phase.MUTATE)
        assert not first.errors, [str(e) for e in first.errors]
        patched = jsonpatch.apply_patch(obj, first.patch)
        assert patched == (first.mutated if first.patch else obj)
        again = evaluate(rules, AdmissionInput.offline(patched, namespace="team-a"), Phase.MUTATE)
        assert again.patch == [], f"{kind.name} is not idempotent on {obj['kind']} {obj['metadata']['name']}"
        changed.append(bool(first.patch))
    assert any(changed), f"{kind.name}: the example {args} changes none of the samples"


def test_all_examples_together_are_idempotent() -> None:
    """Mutations see each other's edits: the whole registry in one rule still converges in one pass."""
    rules = rule_set([{kind.name: copy.deepcopy(args)} for kind, args in EXAMPLES])
    for obj in samples():
        first = evaluate(rules, AdmissionInput.offline(obj, namespace="team-a"), Phase.MUTATE)
        assert not first.errors, [str(e) for e in first.errors]
        patched = jsonpatch.apply_patch(obj, first.patch)
        assert evaluate(rules, AdmissionInput.offline(patched, namespace="team-a"), Phase.MUTATE).patch == []


def documented_mutations() -> dict[str, str]:
    """Operation name -> its row of the mutation table in docs/authoring.md."""
    text = (REPO / "docs" / "authoring.md").read_text(encoding="utf-8")
    header = text.index("| operation | arguments | semantics |")
    rows: dict[str, str] = {}
    for line in text[header:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        first_cell = line.split("|")[1]
        for name in re.findall(r"`(\w+)`", first_cell):
            rows[name] = line
    return rows


def test_docs_mutation_table_matches_the_registry() -> None:
    rows = documented_mutations()
    assert sorted(rows) == sorted(MUTATIONS), "docs/authoring.md's mutation table and mutate.MUTATIONS differ"
    for name, kind in MUTATIONS.items():
        for argument in kind.schema.get("properties", {}):
            assert f"`{argument}`" in rows[name], f"docs/authoring.md: the {name} row does not describe `{argument}`"
