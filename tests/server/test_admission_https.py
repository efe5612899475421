"""The AdmissionReview contract over real HTTPS, as the apiserver sees it."""

from __future__ import annotations

import base64
import copy
import json
import logging
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.support import LiveServer, cpu_pod, gpu_pod, make_review
from webhook.engine import AdmissionInput, Phase, evaluate, load_rules
from webhook.server.logs import JsonFormatter

QUEUE_RULE = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: test-queue-label}
spec:
  match: {kinds: [Pod], operations: [CREATE], gpu: true}
  mutate:
    - setLabels:
        values: {kueue.x-k8s.io/queue-name: team-a-queue, "odd~key/with-both": "yes"}
"""


# gpu-node-affinity ships an empty table (no GPU-node label is on every cluster); these tests
# run as a site with the GPU Operator does, with its row (the rule file's header lists it).
GPU_OPERATOR_ROW = '{prefix: nvidia.com/, key: nvidia.com/gpu.present, operator: In, values: ["true"]}'


@pytest.fixture
def rules_dir(rules_dir: Path) -> Path:
    rule = rules_dir / "gpu-node-affinity.yaml"
    text = rule.read_text()
    assert "byResourcePrefix: []" in text
    rule.write_text(text.replace("byResourcePrefix: []", f"byResourcePrefix: [{GPU_OPERATOR_ROW}]"))
    return rules_dir


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["response"]["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["response"]["patch"]))


async def mutate_until_stable(server: LiveServer, obj: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """Send, apply the patch as the apiserver would, send the result again: it must need no more patch."""
    answer = await server.review("mutate", make_review(obj))
    patch = decode_patch(answer)
    patched = jsonpatch.apply_patch(obj, patch)
    again = await server.review("mutate", make_review(patched))
    assert "patch" not in again["response"], f"second pass patched again: {again['response']}"
    return patched, patch


async def test_response_echoes_uid_and_envelope(live_server: LiveServer) -> None:
    review = make_review(cpu_pod())
    answer = await live_server.review("validate", review)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == review["request"]["uid"]
    assert answer["response"]["allowed"] is True


async def test_gpu_pod_gets_toleration_and_affinity_patch_that_applies_once(live_server: LiveServer) -> None:
    pod = gpu_pod()
    patched, patch = await mutate_until_stable(live_server, pod)
    assert {op["path"] for op in patch} == {"/spec/tolerations", "/spec/affinity"}
    assert patched["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}
    ]


async def test_existing_lists_are_appended_to_and_every_term_gets_the_requirement(live_server: LiveServer) -> None:
    pod = gpu_pod(
        tolerations=[{"key": "spot", "operator": "Exists"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                    ]
                }
            }
        },
    )
    patched, patch = await mutate_until_stable(live_server, pod)
    assert {
        "op": "add",
        "path": "/spec/tolerations/-",
        "value": {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    } in patch
    terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    gpu = {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
    # ORed terms: each must carry the requirement, none may be added
    assert len(terms) == 2
    assert terms[0]["matchExpressions"] == [{"key": "zone", "operator": "In", "values": ["a"]}, gpu]
    assert terms[1]["matchExpressions"] == [gpu]
    assert (
        terms[1]["matchFields"]
        == pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][1]["matchFields"]
    )
    assert patched["spec"]["tolerations"][0] == {"key": "spot", "operator": "Exists"}


async def test_equivalent_toleration_is_left_alone(live_server: LiveServer) -> None:
    # what ExtendedResourceToleration would have added: ours must recognise it
    pod = gpu_pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    _, patch = await mutate_until_stable(live_server, pod)
    assert all(not op["path"].startswith("/spec/tolerations") for op in patch)


@pytest.fixture
def queue_rules(rules_dir: Path) -> Path:
    (rules_dir / "test-queue-label.yaml").write_text(QUEUE_RULE)
    return rules_dir


async def test_label_keys_are_json_pointer_escaped_and_missing_parents_created(
    queue_rules: Path, live_server: LiveServer
) -> None:
    pod = gpu_pod()
    assert "labels" not in pod["metadata"]
    patched, patch = await mutate_until_stable(live_server, pod)
    label_ops = [op for op in patch if op["path"].startswith("/metadata")]
    # the missing map is created whole with its first key, then keys are added with ~1 / ~0 escaping
    assert label_ops[0] == {
        "op": "add",
        "path": "/metadata/labels",
        "value": {"kueue.x-k8s.io/queue-name": "team-a-queue"},
    }
    assert label_ops[1] == {"op": "add", "path": "/metadata/labels/odd~0key~1with-both", "value": "yes"}
    assert patched["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a-queue", "odd~key/with-both": "yes"}
    pod["metadata"]["labels"] = {"app": "x"}
    _, patch = await mutate_until_stable(live_server, pod)
    assert {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "team-a-queue"} in patch


async def test_denial_carries_403_and_names_the_rule(live_server: LiveServer) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "1"}}
    answer = await live_server.review("validate", make_review(pod))
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "gpu-requests-equal-limits" in message
    assert "container trainer requests nvidia.com/gpu 2 but its limit is 1" in message


async def test_update_with_old_object_delete_with_null_object_and_dry_run(live_server: LiveServer) -> None:
    old = cpu_pod()
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    answer = await live_server.review("validate", make_review(new, operation="UPDATE", old=old, dry_run=True))
    assert answer["response"]["allowed"] is False
    assert "NVIDIA_VISIBLE_DEVICES" in answer["response"]["status"]["message"]
    deleted = await live_server.review("validate", make_review(None, operation="DELETE", old=new))
    assert deleted["response"]["allowed"] is True
    deleted = await live_server.review("mutate", make_review(None, operation="DELETE", old=new))
    assert deleted["response"] == {"uid": deleted["response"]["uid"], "allowed": True}


async def test_same_decision_through_engine_and_https(live_server: LiveServer, rules_dir: Path) -> None:
    pod = gpu_pod(nodeSelector={"nvidia.com/gpu.product": "A100"})
    pod["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    )
    ruleset = load_rules(rules_dir).ruleset
    engine = evaluate(ruleset, AdmissionInput(object=pod, namespace="team-a"), phase=Phase.ALL)
    # over HTTPS, as the apiserver does it: mutate, apply the patch, then validate the result
    mutated = await live_server.review("mutate", make_review(pod))
    patched = jsonpatch.apply_patch(pod, decode_patch(mutated))
    validated = await live_server.review("validate", make_review(patched))
    assert patched == engine.mutated
    assert validated["response"]["allowed"] == engine.allowed is False
    assert validated["response"]["status"]["message"].endswith(engine.denial_message)


async def test_subresources_are_never_evaluated(live_server: LiveServer) -> None:
    review = make_review(cpu_pod(), operation="CONNECT")
    review["request"]["subResource"] = "exec"
    review["request"]["object"] = {"apiVersion": "v1", "kind": "PodExecOptions", "command": ["sh"]}
    answer = await live_server.review("validate", review)
    assert answer["response"]["allowed"] is True


async def test_health_readiness_and_metrics(live_server: LiveServer) -> None:
    assert (await live_server.get("/healthz"))[0] == 200
    status, body = await live_server.get("/readyz")
    assert status == 200
    detail = json.loads(body)
    assert detail["rules"]["generation"] == 1 and detail["certificate"]["valid"] is True
    await live_server.review("validate", make_review(cpu_pod()))
    status, text = await live_server.get("/metrics")
    assert status == 200
    assert (
        'gpu_webhook_requests_total{decision="allowed",endpoint="validate",kind="Pod",operation="CREATE"} 1.0' in text
    )
    assert "gpu_webhook_certificate_expiry_timestamp_seconds" in text
    assert "gpu_webhook_rules_generation 1.0" in text


async def test_denial_is_logged_once_as_structured_info(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "3"
    with caplog.at_level(logging.DEBUG, logger="gpu_webhook"):
        await live_server.review("validate", make_review(pod, username="bob@example.com"))
    decisions = [r for r in caplog.records if r.getMessage() == "admission decision"]
    assert len(decisions) == 1
    record = decisions[0]
    assert record.levelno == logging.INFO
    assert record.decision == "denied" and record.user == "bob@example.com" and record.object_name == "train"
    # per rule: other rules of the pack may deny this pod too
    assert any(v.startswith("gpu-requests-equal-limits: pod train") for v in record.violations)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # the line is valid JSON as the JSON formatter writes it
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "info" and line["decision"] == "denied"
