"""Properties of the default rule pack over generated Pods and workloads (DESIGN §3).

For any object: the patch applies cleanly with jsonpatch and gives the engine's mutated
object; applying the rule set to its own output changes nothing; the fields we touch
stay valid for their kind; and every door gives the same decision.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import orjson
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import load_rules_once
from tests.support import RULES, StaticNamespaces, client_ssl, make_review, start_server
from webhook.audit.results import AUDIT_LIMITS
from webhook.cli import main
from webhook.engine import MUTATIONS, AdmissionInput, Phase, compile_documents, evaluate
from webhook.engine.workloads import pod_template_targets
from webhook.kubeyaml import load_documents

RULESET = load_rules_once(RULES).ruleset  # the session's `pack` (tests/conftest.py): one load, shared
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
GPU_RESOURCES = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu", "cpu", "memory"]

names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
label_keys = st.one_of(
    st.sampled_from(["app", "kueue.x-k8s.io/queue-name", "a~b", "x/y~1z", "team.example.com/owner", "~0", "/"]),
    st.from_regex(r"[a-z]{1,5}(\.[a-z]{1,5})?/[a-z~]{1,5}", fullmatch=True),
)
label_values = st.from_regex(r"([a-z0-9]([-a-z0-9_.]{0,8}[a-z0-9])?)?", fullmatch=True)
labels = st.one_of(st.none(), st.just({}), st.dictionaries(label_keys, label_values, max_size=4))
quantity = st.sampled_from(["1", "2", "8", "0", "500m", "1Gi"])


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any] | None:
    if draw(st.booleans()):
        return None
    limits = draw(st.dictionaries(st.sampled_from(GPU_RESOURCES), quantity, max_size=2))
    out: dict[str, Any] = {}
    if limits or draw(st.booleans()):
        out["limits"] = limits
    if draw(st.booleans()):  # requests equal to limits, or different, or missing
        out["requests"] = (
            dict(limits)
            if draw(st.booleans())
            else draw(st.dictionaries(st.sampled_from(GPU_RESOURCES), quantity, max_size=2))
        )
    return out


@st.composite
def container(draw: st.DrawFn, init: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": draw(names), "image": "registry.example/app:1"}
    r = draw(resources())
    if r is not None:
        c["resources"] = r
    env = draw(
        st.lists(
            st.sampled_from(
                [
                    {"name": "A", "value": "1"},
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ]
            ),
            max_size=2,
        )
    )
    if env or draw(st.booleans()):
        c["env"] = env
    if init and draw(st.booleans()):
        c["restartPolicy"] = "Always"  # a sidecar
    return c


tolerations = st.sampled_from(
    [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "other", "operator": "Exists"},
        {"operator": "Exists"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ]
)
requirement = st.sampled_from(
    [
        {"key": "zone", "operator": "In", "values": ["a", "b"]},
        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
        {"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]},
        {"key": "pool", "operator": "Exists"},
    ]
)


@st.composite
def affinity(draw: st.DrawFn) -> dict[str, Any] | None:
    shape = draw(st.sampled_from(["none", "empty", "preferred-only", "required"]))
    if shape == "none":
        return None
    if shape == "empty":
        return {}
    if shape == "preferred-only":
        return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    terms = draw(
        st.lists(
            st.one_of(
                st.builds(lambda e: {"matchExpressions": e}, st.lists(requirement, min_size=1, max_size=3)),
                st.just({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}),
            ),
            min_size=1,
            max_size=3,
        )
    )
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


@st.composite
def pod_spec(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(container(), min_size=1, max_size=3))}
    init = draw(st.lists(container(init=True), max_size=2))
    if init:
        spec["initContainers"] = init
    t = draw(st.one_of(st.none(), st.lists(tolerations, max_size=3)))
    if t is not None:
        spec["tolerations"] = t
    a = draw(affinity())
    if a is not None:
        spec["affinity"] = a
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(label_keys, label_values, max_size=2))
    return spec


@st.composite
def template(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {"spec": draw(pod_spec())}
    metadata_labels = draw(labels)
    if metadata_labels is not None:
        out["metadata"] = {"labels": metadata_labels}
    return out


@st.composite
def workload(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["Pod", "Deployment", "Job", "PyTorchJob"]))
    metadata: dict[str, Any] = {"name": draw(names), "namespace": "team-a"}
    object_labels = draw(labels)
    if object_labels is not None:
        metadata["labels"] = object_labels
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": draw(pod_spec())}
    if kind == "PyTorchJob":
        roles = draw(st.lists(st.sampled_from(["Master", "Worker"]), min_size=1, max_size=2, unique=True))
        specs = {role: {"replicas": 1, "template": draw(template())} for role in roles}
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": kind,
            "metadata": metadata,
            "spec": {"pytorchReplicaSpecs": specs},
        }
    api = "apps/v1" if kind == "Deployment" else "batch/v1"
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": {"template": draw(template())}}


def admission(obj: dict[str, Any]) -> AdmissionInput:
    return AdmissionInput(object=obj, operation="CREATE", kind=obj["kind"], namespace="team-a")


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Pod":
        return [obj["spec"]]
    found = []
    for target in pod_template_targets(obj):
        node: Any = obj
        for part in target.pod_specs[0]:
            node = node[part]
        found.append(node)
    return found


def assert_valid_pod_spec(spec: dict[str, Any]) -> None:
    """Structural checks of the fields the rules touch, as the apiserver's validation sees them."""
    if "tolerations" in spec:
        assert isinstance(spec["tolerations"], list)
        for toleration in spec["tolerations"]:
            assert isinstance(toleration, dict)
            assert all(isinstance(v, str | int) for v in toleration.values())
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is not None:
        terms = required["nodeSelectorTerms"]
        assert isinstance(terms, list) and terms, "nodeSelectorTerms must not be empty"
        for term in terms:
            assert isinstance(term, dict) and ("matchExpressions" in term or "matchFields" in term)
            for expression in term.get("matchExpressions", []):
                assert isinstance(expression["key"], str) and isinstance(expression["operator"], str)
                assert all(isinstance(v, str) for v in expression.get("values", []))


def assert_valid_labels(obj: Any) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "labels" and isinstance(value, dict):
                for name, label in value.items():
                    assert isinstance(name, str) and isinstance(label, str)
                    assert len(label) <= 63 and LABEL_VALUE.match(label), label
            else:
                assert_valid_labels(value)
    elif isinstance(obj, list):
        for item in obj:
            assert_valid_labels(item)


@given(workload())
def test_patch_applies_cleanly_is_idempotent_and_keeps_the_object_valid(obj: dict[str, Any]) -> None:
    assert RULESET is not None
    original = orjson.loads(orjson.dumps(obj))
    decision = evaluate(RULESET, admission(obj), Phase.MUTATE)
    assert obj == original, "the engine must not edit the request object"
    patched = jsonpatch.apply_patch(original, decision.patch) if decision.patch else original
    if decision.patch:
        assert patched == decision.mutated
    again = evaluate(RULESET, admission(patched), Phase.MUTATE)
    assert again.patch == [], f"second pass changed the object: {again.patch}"
    for spec in pod_specs(patched):
        assert_valid_pod_spec(spec)
    assert_valid_labels(patched)


# Every mutation the engine knows, with the examples its registry entry declares (engine/mutate.py
# MUTATIONS), in one rule: a mutation added to the registry is covered here without editing this file.
REGISTRY_RULE = {
    "apiVersion": "gpu-webhook.io/v1alpha1",
    "kind": "GPUPolicy",
    "metadata": {"name": "every-mutation"},
    "spec": {
        "match": {"kinds": ["Pod", "Deployment", "Job", "PyTorchJob"]},
        "mutate": [{kind.name: args} for kind in MUTATIONS.values() for args in kind.examples],
    },
}
REGISTRY_RULESET = compile_documents(load_documents(yaml.safe_dump(REGISTRY_RULE), "every-mutation.yaml")).require()


@given(workload())
def test_every_registered_mutation_patches_cleanly_and_idempotently(obj: dict[str, Any]) -> None:
    obj = orjson.loads(orjson.dumps(obj))  # as from a request: no dict shared between two places
    decision = evaluate(REGISTRY_RULESET, admission(obj), Phase.MUTATE)
    assert not decision.errors, [str(e) for e in decision.errors]
    patched = jsonpatch.apply_patch(obj, decision.patch) if decision.patch else obj
    assert patched == (decision.mutated if decision.patch else obj)
    again = evaluate(REGISTRY_RULESET, admission(patched), Phase.MUTATE)
    assert again.patch == [], f"second pass changed the object: {again.patch}"
    for spec in pod_specs(patched):
        assert_valid_pod_spec(spec)
    assert_valid_labels(patched)


async def _through_server(objects: list[dict[str, Any]], cert_dir: Path, rules_dir: Path) -> list[dict[str, Any]]:
    server = await start_server(cert_dir, rules_dir)
    answers = []
    try:
        connector = aiohttp.TCPConnector(ssl=client_ssl(cert_dir))
        async with aiohttp.ClientSession(connector=connector) as session:
            for obj in objects:
                answer = {}
                for endpoint in ("mutate", "validate"):
                    review = make_review(obj)
                    url = f"https://localhost:{server.port}/{endpoint}"
                    async with session.post(url, json=review) as response:
                        assert response.status == 200
                        answer[endpoint] = (await response.json())["response"]
                answers.append(answer)
    finally:
        await server.stop()
    return answers


def test_same_decision_through_engine_server_and_audit(cert_dir: Path, rules_dir: Path, tmp_path: Path) -> None:
    """Every door gives one decision: the engine, the HTTPS server and `gpu-webhook audit`."""
    objects: list[dict[str, Any]] = []

    @settings(max_examples=60 if settings().max_examples <= 100 else 500)  # each one is two HTTPS requests
    @given(workload())
    def collect(obj: dict[str, Any]) -> None:
        objects.append(obj)

    collect()
    answers = asyncio.run(_through_server(objects, cert_dir, rules_dir))
    assert RULESET is not None
    for obj, answer in zip(objects, answers, strict=True):
        mutated = evaluate(RULESET, admission(obj), Phase.MUTATE)
        patch = answer["mutate"].get("patch")
        assert (orjson.loads(base64.b64decode(patch)) if patch else []) == mutated.patch, obj
        validated = evaluate(RULESET, admission(obj), Phase.VALIDATE)
        assert answer["validate"]["allowed"] is validated.allowed, obj
        if not validated.allowed:
            assert validated.denial_message in answer["validate"]["status"]["message"]

    # the audit door, run as a user runs it, on a file holding the same objects
    documents = [{**obj, "metadata": {**obj.get("metadata", {}), "namespace": "team-a"}} for obj in objects]
    manifest = tmp_path / "objects.yaml"
    # JSON documents (JSON is YAML): PyYAML writes `name: y` plain, which kubectl, and so the audit,
    # reads as the boolean true (go-yaml v2); JSON keeps each value what it is, and the key order,
    # which orders the patch
    manifest.write_text("---\n".join(json.dumps(document) + "\n" for document in documents))
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        main(["audit", str(manifest), "--rules", str(rules_dir), "-o", "json"])
    rows = json.loads(output.getvalue())["objects"]
    assert len(rows) == len(documents)
    for obj, row in zip(documents, rows, strict=True):
        # the audit's limits: offline doors run without a time budget
        full = evaluate(RULESET, admission(obj), Phase.ALL, limits=AUDIT_LIMITS)
        assert row.get("patch", []) == full.patch, obj
        denied = {r["rule"] for r in row["rules"] if r["result"] == "fail"}
        assert denied == {v.rule for v in full.violations}, obj


# -- the doors agree on request.*, on namespace context and on manifests without a namespace ---------

DOOR_RULES = """
# Reads request.*: a door that builds its own `request` (without kind, name or namespace) denies.
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: door-reads-request}
spec:
  action: Deny
  match: {kinds: [Pod, Deployment, Job, PyTorchJob], operations: [CREATE]}
  validate:
    expression: >-
      request.kind.kind == object.kind && request.name == object.metadata.name &&
      request.namespace == object.metadata.namespace && request.operation == 'CREATE' &&
      request.kind.version != ''
    message: request does not describe the object
---
# Namespace-dependent: denies GPU work in namespaces labelled gpu-access=none.
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: door-namespace-gpu-access}
spec:
  action: Deny
  match:
    kinds: [Pod]
    operations: [CREATE]
    gpu: true
    namespaceSelector: {matchLabels: {gpu-access: none}}
  validate: {expression: "false", message: "no GPUs in this namespace"}
"""
NAMESPACES = {
    "team-a": {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "team-a",
            "labels": {"gpu-access": "none", "gpu-webhook.io/tenant": "true", "team": "a", "cost-center": "42"},
        },
    }
}


async def _through_server_with_namespaces(
    objects: list[dict[str, Any]], cert_dir: Path, rules_dir: Path
) -> list[dict[str, Any]]:
    server = await start_server(cert_dir, rules_dir, namespaces=StaticNamespaces(NAMESPACES))  # the Namespace the manifest carries
    answers = []
    try:
        connector = aiohttp.TCPConnector(ssl=client_ssl(cert_dir))
        async with aiohttp.ClientSession(connector=connector) as session:
            for obj in objects:
                # the apiserver writes the request's namespace into a namespace-less object before admission
                submitted = {**obj, "metadata": {**obj["metadata"], "namespace": "team-a"}}
                answer = {}
                for endpoint in ("mutate", "validate"):
                    url = f"https://localhost:{server.port}/{endpoint}"
                    async with session.post(url, json=make_review(submitted, namespace="team-a")) as response:
                        answer[endpoint] = (await response.json())["response"]
                answers.append(answer)
    finally:
        await server.stop()
    return answers


def test_doors_agree_on_request_namespace_context_and_namespace_less_manifests(
    cert_dir: Path, rules_dir: Path, tmp_path: Path
) -> None:
    """Server, audit (-n, Namespace in the input), explain and test give one decision per object."""
    (rules_dir / "door-rules.yaml").write_text(DOOR_RULES)
    objects: list[dict[str, Any]] = []

    @settings(max_examples=15)
    @given(workload())
    def collect(obj: dict[str, Any]) -> None:
        metadata = {k: v for k, v in obj["metadata"].items() if k != "namespace"}  # as `helm template` writes it
        objects.append({**obj, "metadata": metadata})

    collect()
    answers = asyncio.run(_through_server_with_namespaces(objects, cert_dir, rules_dir))
    served = [a["validate"]["allowed"] and a["mutate"]["allowed"] for a in answers]
    assert any(not allowed for allowed in served) and any(served)  # both kinds of answer are compared

    # audit: the Namespace object in the stream, namespace-less manifests placed with -n
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(yaml.safe_dump_all([NAMESPACES["team-a"], *objects], sort_keys=False))
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        main(["audit", str(manifest), "--rules", str(rules_dir), "-o", "json", "-n", "team-a"])
    rows = json.loads(output.getvalue())["objects"]
    assert len(rows) == len(objects)

    # test: the same objects as GPUPolicyTest cases, expecting what the server answered
    cases = [
        {
            "name": f"case-{i}",
            "object": obj,
            "namespace": "team-a",
            "namespaceObject": NAMESPACES["team-a"],
            "expect": {"allowed": allowed},
        }
        for i, (obj, allowed) in enumerate(zip(objects, served, strict=True))
    ]
    suite = tmp_path / "suite.test.yaml"
    suite.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "gpu-webhook.io/v1alpha1",
                "kind": "GPUPolicyTest",
                "metadata": {"name": "doors"},
                "spec": {"cases": cases},
            },
            sort_keys=False,
        )
    )
    with contextlib.redirect_stdout(io.StringIO()) as suite_output:
        code = main(["test", str(suite), "--rules", str(rules_dir)])
    assert code == 0, suite_output.getvalue()

    for index, (obj, answer, row) in enumerate(zip(objects, answers, rows, strict=True)):
        allowed = served[index]
        assert row["namespace"] == "team-a"
        assert row["result"] != "skip" and not any(r["result"] == "skip" for r in row["rules"]), row
        assert (not allowed) == any(r.get("blocks") for r in row["rules"]), (obj, answer, row)
        denied = {r["rule"] for r in row["rules"] if r["result"] == "fail"}
        assert "door-reads-request" not in denied
        if not answer["validate"]["allowed"]:
            for rule in denied:
                assert f"[{rule}]" in answer["validate"]["status"]["message"]
        patch = answer["mutate"].get("patch")
        assert (orjson.loads(base64.b64decode(patch)) if patch else []) == row.get("patch", []), obj

        # explain, with the Namespace beside the object in its file
        single = tmp_path / f"object-{index}.yaml"
        single.write_text(yaml.safe_dump_all([NAMESPACES["team-a"], obj], sort_keys=False))
        with contextlib.redirect_stdout(io.StringIO()):
            explained = main(["explain", "-f", str(single), "--rules", str(rules_dir), "-n", "team-a"])
        assert (explained == 0) == allowed, obj
