"""What each accelerator form costs evaluate(): the default pack validating a GPU pod that asks for its
GPU as nvidia.com/gpu, as a DRA extended resource (deviceclass.resource.kubernetes.io/gpu.nvidia.com),
as Volcano vGPUs, as a HAMi memory share, and through a ResourceClaimTemplate whose MIG selector the
engine reads for the pinned profile (mig-profiles), with and without a restricted namespace.

    python -m bench.accelerator_forms [--iterations 2000] [--rounds 5]

Every configuration runs in each round, in turn, on the same process: compare the ratios to
"nvidia.com/gpu" (printed), not the absolute microseconds across runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.interleaved import print_ratios, time_in_turns
from webhook.engine import AdmissionInput, ClusterContext, Phase, evaluate, load_rules

RULES = Path(__file__).resolve().parents[1] / "rules"
MIG_SELECTOR = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig' && "
    "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
)
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "mig", "namespace": "team-a"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": "mig.nvidia.com",
                            "selectors": [{"cel": {"expression": MIG_SELECTOR}}],
                        },
                    }
                ]
            }
        }
    },
}


def gpu_pod(accelerators: dict[str, str], claim: bool = False) -> dict[str, Any]:
    limits = {"memory": "32Gi", **accelerators}
    container: dict[str, Any] = {
        "name": "main",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "resources": {"requests": {"cpu": "4", **limits}, "limits": limits},
    }
    spec: dict[str, Any] = {"containers": [container]}
    if claim:
        container["resources"]["claims"] = [{"name": "mig"}]
        spec["resourceClaims"] = [{"name": "mig", "resourceClaimTemplateName": "mig"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "team-a"}, "spec": spec}


def namespace(restricted: bool) -> dict[str, Any]:
    annotations = {"gpu-webhook.io/allowed-mig-profiles": "1g.10gb"} if restricted else {}
    labels = {"gpu-webhook.io/tenant": "true"}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": labels, "annotations": annotations},
    }


CONFIGURATIONS: dict[str, tuple[dict[str, Any], bool]] = {
    "nvidia.com/gpu": (gpu_pod({"nvidia.com/gpu": "1"}), False),
    "DRA extended resource": (gpu_pod({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}), False),
    "Volcano vGPU": (gpu_pod({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "4096"}), False),
    "HAMi memory share": (gpu_pod({"nvidia.com/gpumem": "4096"}), False),
    "MIG claim template": (gpu_pod({}, claim=True), False),
    "MIG claim template, restricted profiles": (gpu_pod({}, claim=True), True),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    ruleset = load_rules(RULES).require()
    context = ClusterContext(resource_claims={}, resource_claim_templates={"mig": TEMPLATE})

    def run(pod: dict[str, Any], restricted: bool) -> Callable[[], None]:
        ns = namespace(restricted)

        def once() -> None:
            admission = AdmissionInput.offline(pod, namespace_object=ns).with_context(context)
            decision = evaluate(ruleset, admission, phase=Phase.VALIDATE, trace=False)
            assert decision.allowed, decision.denial_message

        return once

    runs = {name: run(*configuration) for name, configuration in CONFIGURATIONS.items()}
    print_ratios(time_in_turns(runs, args.rounds, args.iterations), "nvidia.com/gpu")


if __name__ == "__main__":
    main()
