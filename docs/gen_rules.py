"""Generate docs/rules.md from rules/ and examples/: every example message and patch comes from the engine.

.venv/bin/python docs/gen_rules.py            # rewrite docs/rules.md
.venv/bin/python docs/gen_rules.py --check    # exit 1 if docs/rules.md is stale (tests run this)
"""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's webhook package, wherever this is run from
try:
    import yaml

    from webhook.engine import KIND_TABLE, AdmissionInput, evaluate, load_rules
except ImportError as error:  # a Python without the project's dependencies: say which one to use
    print(
        f"gen_rules.py: {error}. Run it with the project's environment:\n"
        f"  cd {ROOT} && python3 -m venv .venv && .venv/bin/pip install -e '.[test]'\n"
        "  .venv/bin/python docs/gen_rules.py",
        file=sys.stderr,
    )
    sys.exit(2)

RULES = ROOT / "rules"
EXAMPLES = ROOT / "examples"
OUTPUT = ROOT / "docs" / "rules.md"


def _kinds_text(entry: Any) -> str:
    """One match.kinds entry as the page says it: a kind, or a group with the kinds it stands for."""
    if isinstance(entry, dict) and "kindGroup" in entry:
        return f"the {entry['kindGroup']} group ({', '.join(KIND_TABLE.group(entry['kindGroup']))})"
    return str(entry["kind"]) if isinstance(entry, dict) else str(entry)


def _example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())


def _namespace(name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
    }


def _pod(name: str, resources: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.08-py3"}
    if resources is not None:
        container["resources"] = resources
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"priority": 0, "containers": [container], **spec},
    }


def _claim_template(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": request}]}}},
    }


GPU = {
    "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
    "limits": {"memory": "16Gi", "nvidia.com/gpu": "1"},
}
TENANT = {"gpu-webhook.io/tenant": "true"}


# The cluster every scenario runs in has the PriorityClasses the pack's priority rules name: the
# webhook sets a class only when its PriorityClass watch shows the class exists.
PRIORITY_CLASSES = [
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
    for name, value in (("gpu-batch", 1000), ("gpu-critical", 100000))
]


# and Kueue's objects as the webhook's watches give them: team-a's LocalQueue gpu, whose ClusterQueue's one
# flavor is on GPU nodes
KUEUE_QUEUES = [
    {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "a100"},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpu-only"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
            {"name": "a100", "resources": [
                {"name": "cpu", "nominalQuota": 96}, {"name": "memory", "nominalQuota": "1Ti"},
                {"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]},
    },
    {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "gpu", "namespace": "team-a"},
        "spec": {"clusterQueue": "gpu-only"},
    },
]  # fmt: skip


@dataclass(frozen=True)
class Scenario:
    """One object through one rule; the doc shows what the engine answered."""

    describe: str
    build: Callable[[], dict[str, Any]]
    namespace: dict[str, Any] | None = None
    silent: str = ""  # why the shipped params rightly do nothing here (else doing nothing is an error)


def _with(name: str, change: Callable[[dict[str, Any]], None]) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        obj = _example(name)
        change(obj)
        return obj

    return build


def _labelled_pod() -> dict[str, Any]:
    pod = _pod("notebook", GPU)
    pod["metadata"]["labels"] = {"gpu-webhook.io/workload-type": "serving"}
    return pod


def _queued_cpu_job() -> dict[str, Any]:
    job = _pod("etl", {"limits": {"cpu": "4", "memory": "8Gi"}})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "etl", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "gpu"}},
        "spec": {"template": {"spec": {**job["spec"], "restartPolicy": "Never"}}},
    }


SCENARIOS: dict[str, Scenario] = {
    "cpu-pods-off-gpu-nodes": Scenario(
        "a CPU-only pod in a tenant namespace that tolerates the GPU taint",
        lambda: _pod("etl", {"requests": {"cpu": "2"}}, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]),
        _namespace("team-a", TENANT),
    ),
    "cpu-workload-in-gpu-only-queue": Scenario(
        "a tenant CPU Job in LocalQueue gpu, whose ClusterQueue's only flavor (a100) is on GPU nodes",
        _queued_cpu_job,
        _namespace("team-a", TENANT),
    ),
    "dra-claim-limits": Scenario(
        "a tenant ResourceClaimTemplate asking for every GPU of a node (allocationMode: All)",
        lambda: _claim_template("whole-node", {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}),
        _namespace("team-a", TENANT),
    ),
    "dra-device-classes-allowed": Scenario(
        "a tenant ResourceClaimTemplate for GPU passthrough (vfio.gpu.nvidia.com)",
        lambda: _claim_template("vm-gpu", {"deviceClassName": "vfio.gpu.nvidia.com"}),
        _namespace("team-a", TENANT),
    ),
    "dra-pod-claims-resolvable": Scenario(
        "a tenant pod naming a ResourceClaim that does not exist",
        lambda: _pod("sneaky", None, resourceClaims=[{"name": "gpu", "resourceClaimName": "nowhere"}]),
        _namespace("team-a", TENANT),
    ),
    "gpu-container-resources": Scenario("examples/job-finetune.yaml", lambda: _example("job-finetune.yaml")),
    "gpu-cost-labels": Scenario(
        "examples/deployment-vllm-serving.yaml in a namespace labelled team=llm, cost-center=cc-4711",
        lambda: _example("deployment-vllm-serving.yaml"),
        _namespace("ml-serving", {"team": "llm", "cost-center": "cc-4711"}),
    ),
    "gpu-envfrom-device-variables": Scenario(
        "a tenant GPU container with envFrom: [{configMapRef: {name: settings}}]",
        lambda: {
            **_pod("train", GPU),
            "spec": {"containers": [{**_pod("train", GPU)["spec"]["containers"][0], "envFrom": [{"configMapRef": {"name": "settings"}}]}]},
        },
        _namespace("team-a", TENANT),
    ),
    "gpu-node-affinity": Scenario(
        "examples/pod-notebook.yaml",
        lambda: _example("pod-notebook.yaml"),
        silent="the shipped per-vendor table is empty (no GPU-node label is on every cluster); add your nodes' label",
    ),
    "gpu-per-pod-ceiling": Scenario(
        "examples/jobset-llm-pretrain.yaml (8 GPUs per worker) in a namespace annotated max-gpus-per-pod: 4",
        lambda: _example("jobset-llm-pretrain.yaml"),
        _namespace("ml-research", annotations={"gpu-webhook.io/max-gpus-per-pod": "4"}),
    ),
    "gpu-requests-equal-limits": Scenario(
        "examples/replicaset-embedder.yaml", lambda: _example("replicaset-embedder.yaml")
    ),
    "gpu-toleration": Scenario("examples/rayjob-batch-inference.yaml", lambda: _example("rayjob-batch-inference.yaml")),
    "kueue-priority-class": Scenario(
        "examples/mpijob-horovod.yaml",
        lambda: _example("mpijob-horovod.yaml"),
        _namespace("ml-research"),
    ),
    "kueue-priority-class-allowed": Scenario(
        "a tenant Job labelled kueue.x-k8s.io/priority-class: platform-critical",
        lambda: _with("job-finetune.yaml", lambda o: o["metadata"].setdefault("labels", {}).update(
            {"kueue.x-k8s.io/priority-class": "platform-critical"}))(),
        _namespace("ml-research", TENANT),
    ),
    "kueue-queue-name": Scenario(
        "examples/job-finetune.yaml in a namespace annotated gpu-webhook.io/queue: research",
        lambda: _example("job-finetune.yaml"),
        _namespace("ml-research", annotations={"gpu-webhook.io/queue": "research"}),
    ),
    "kueue-queue-required": Scenario(
        'examples/tfjob-resnet.yaml in a namespace labelled gpu-webhook.io/queue-required: "true"',
        lambda: _example("tfjob-resnet.yaml"),
        _namespace("ml-research", {"gpu-webhook.io/queue-required": "true"}),
    ),
    "mig-single-strategy-placement": Scenario(
        "a pod requesting nvidia.com/gpu in a namespace annotated gpu-webhook.io/allowed-mig-profiles: 1g.10gb",
        lambda: _pod("notebook", GPU),
        _namespace("notebooks", annotations={"gpu-webhook.io/allowed-mig-profiles": "1g.10gb"}),
    ),
    "mig-profiles": Scenario(
        "examples/cronjob-nightly-eval.yaml (mig-1g.10gb) in a namespace that allows only 2g.20gb",
        lambda: _example("cronjob-nightly-eval.yaml"),
        _namespace("ml-research", annotations={"gpu-webhook.io/allowed-mig-profiles": "2g.20gb"}),
    ),
    "no-device-env-in-tenants": Scenario(
        "a tenant GPU container that sets NVIDIA_VISIBLE_DEVICES=all itself",
        lambda: {
            **_pod("greedy", GPU),
            "spec": {
                "containers": [
                    {**_pod("greedy", GPU)["spec"]["containers"][0], "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
                ]
            },
        },
        _namespace("team-a", TENANT),
    ),
    "no-device-list-mounts-in-tenants": Scenario(
        "a tenant GPU container mounting /dev/null at /var/run/nvidia-container-devices/all",
        lambda: {
            **_pod("greedy", GPU, volumes=[{"name": "all", "hostPath": {"path": "/dev/null"}}]),
            "spec": {
                "volumes": [{"name": "all", "hostPath": {"path": "/dev/null"}}],
                "containers": [
                    {
                        **_pod("greedy", GPU)["spec"]["containers"][0],
                        "volumeMounts": [{"name": "all", "mountPath": "/var/run/nvidia-container-devices/all"}],
                    }
                ],
            },
        },
        _namespace("team-a", TENANT),
    ),
    "no-gpu-device-hostpath": Scenario(
        "a tenant pod mounting /dev/nvidia0 from the host",
        lambda: _pod("probe", GPU, volumes=[{"name": "gpu0", "hostPath": {"path": "/dev/nvidia0"}}]),
        _namespace("team-a", TENANT),
    ),
    "no-host-namespaces-on-gpu-pods": Scenario(
        "a GPU pod with hostIPC in a tenant namespace",
        lambda: _pod("nccl-test", GPU, hostIPC=True),
        _namespace("team-a", TENANT),
    ),
    "no-node-name-in-tenants": Scenario(
        "a tenant CPU pod pinned to a GPU node with spec.nodeName",
        lambda: _pod("pinned", nodeName="gpu-node-7"),
        _namespace("team-a", TENANT),
    ),
    "no-privileged-in-tenants": Scenario(
        "a privileged container in a tenant namespace",
        lambda: {**_pod("debug"), "spec": {"containers": [{"name": "shell", "securityContext": {"privileged": True}}]}},
        _namespace("team-a", TENANT),
    ),
    "no-timeslicing-in-production": Scenario(
        "a pod requesting nvidia.com/gpu.shared in a namespace labelled environment=production",
        lambda: _pod("chatbot", {"limits": {"memory": "8Gi", "nvidia.com/gpu.shared": "1"}}),
        _namespace("team-a", {"environment": "production"}),
    ),
    "no-visible-devices-without-gpu": Scenario(
        "a container setting NVIDIA_VISIBLE_DEVICES=all without a GPU request",
        lambda: {
            **_pod("sneaky"),
            "spec": {"containers": [{"name": "main", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]},
        },
    ),
    "priority-class-allowed": Scenario(
        "a tenant GPU pod with priorityClassName system-cluster-critical",
        lambda: _pod("greedy", GPU, priorityClassName="system-cluster-critical"),
        _namespace("team-a", TENANT),
    ),
    "priority-class-by-workload": Scenario(
        "examples/deployment-vllm-serving.yaml",
        lambda: _example("deployment-vllm-serving.yaml"),
    ),
    "production-gpu-placement": Scenario(
        "a pod requesting nvidia.com/gpu in a namespace labelled environment=production",
        lambda: _pod("chatbot", GPU),
        _namespace("team-a", {"environment": "production"}),
    ),
    "runtime-class-allowed": Scenario(
        "a tenant CPU pod with runtimeClassName: nvidia",
        lambda: _pod("sneak", runtimeClassName="nvidia"),
        _namespace("team-a", TENANT),
    ),
    "serving-readiness-probe": Scenario(
        "examples/deployment-vllm-serving.yaml", lambda: _example("deployment-vllm-serving.yaml")
    ),
    "visible-devices-void": Scenario(
        "a tenant CPU pod (its image or an envFrom ConfigMap may say NVIDIA_VISIBLE_DEVICES=all)",
        lambda: _pod("etl", {"requests": {"cpu": "2"}}),
        _namespace("team-a", TENANT),
    ),
    "spot-training-checkpoint": Scenario("examples/pytorchjob-llama2.yaml", lambda: _example("pytorchjob-llama2.yaml")),
}
# A second object for rules whose interesting patch differs by target kind.
EXTRA: dict[str, Scenario] = {
    "priority-class-by-workload": Scenario("a bare Pod labelled gpu-webhook.io/workload-type: serving", _labelled_pod),
}


def _header(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return " ".join(lines)


def _params_block(text: str) -> str:
    found = re.search(r"^  params:\n((?:    .*\n|\s*\n)+)", text, re.M)
    return "\n".join(line[4:] for line in found.group(1).rstrip().splitlines()) if found else ""


def _outcome(rule_file: Path, scenario: Scenario) -> list[str]:
    ruleset = load_rules(rule_file).ruleset
    assert ruleset is not None
    obj = scenario.build()
    ns = scenario.namespace or _namespace(obj["metadata"].get("namespace", "default"))
    decision = evaluate(
        ruleset,
        AdmissionInput.offline(copy.deepcopy(obj), namespace_object=ns, cluster_objects=PRIORITY_CLASSES + KUEUE_QUEUES),
    )
    out = [f"Input: {scenario.describe}.", ""]
    if decision.errors:
        raise SystemExit(f"{rule_file.name}: evaluation error in the doc scenario: {decision.errors}")
    for label, found in (("Denial", decision.violations), ("Warning", decision.warnings)):
        for violation in found:
            out += [f"{label}:", "", "```", violation.message, "```", ""]
    if decision.patch:
        out += ["Patch:", "", "```json", json.dumps(decision.patch, indent=2), "```", ""]
    if not (decision.violations or decision.warnings or decision.patch):
        if scenario.silent:
            return [*out, f"Nothing: {scenario.silent}", ""]
        raise SystemExit(f"{rule_file.name}: the doc scenario triggers nothing")
    return out


def render() -> str:
    out = [
        "# The default rule pack",
        "",
        "Generated by `python docs/gen_rules.py` from `rules/` and `examples/`: every message and patch below",
        "is what the engine answered. Edit the rules or the generator, not this file.",
        "",
        "Rules written for `Pod` also apply to the pod templates of every workload kind (the table in `webhook/engine/workloads.py`);",
        "rules listing job kinds act on the top-level job object, where Kueue reads its labels.",
        "",
    ]
    files = sorted(RULES.glob("*.yaml"))
    out += [f"- [{f.stem}](#{f.stem})" for f in files] + [""]
    for file in files:
        text = file.read_text()
        rule = yaml.safe_load(text)
        spec = rule["spec"]
        match = spec["match"]
        out += [f"## {file.stem}", "", rule["metadata"]["annotations"]["gpu-webhook.io/description"], ""]
        out += [f"**Why.** {_header(text)}", ""]
        names = KIND_TABLE.kind_names(match["kinds"])
        kinds = ", ".join(map(_kinds_text, match["kinds"])) + (" (and every pod template)" if "Pod" in names else "")
        does = spec.get("action", "Deny") if "validate" in spec else "Mutate"
        if "validate" in spec and "mutate" in spec:
            does = f"Mutate, then {does}"
        out += [f"**Does:** {does} · **Kinds:** {kinds} · **Operations:** {', '.join(match['operations'])}", ""]
        params = _params_block(text)
        if params:
            out += ["**Params** (with their defaults):", "", "```yaml", params, "```", ""]
        else:
            out += ["**Params:** none; the mutation's arguments are in the rule.", ""]
        out += ["**Example.**", ""]
        out += _outcome(file, SCENARIOS[file.stem])
        if file.stem in EXTRA:
            out += _outcome(file, EXTRA[file.stem])
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if OUTPUT.read_text() != text:
            print("docs/rules.md is stale: run python docs/gen_rules.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
