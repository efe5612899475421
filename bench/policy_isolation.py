"""What leaving broken policy objects out costs a (re)load (webhook/policies/isolation.py): the shipped
pack with 10 good GPUPolicies and an overlay, alone and beside 1 or 10 GPUPolicies whose CEL does not
compile, and beside an overlay that breaks a rule of the pack.

    python -m bench.policy_isolation [--iterations 3] [--rounds 5]

A load runs in a worker thread at start-up and when an object changes, never per request. Every
configuration runs in each round, in turn, on the same process (the CEL programs compiled once for
all): compare the ratios to "all good" (printed), not the absolute milliseconds across runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.interleaved import print_ratios, time_in_turns
from webhook.kube.policyobjects import PolicyObject, policy_object
from webhook.policies.isolation import isolated_load

RULES = str(Path(__file__).resolve().parents[1] / "rules")
GROUP_VERSION = "gpu-webhook.io/v1alpha1"


def gpupolicy(name: str, expression: str) -> PolicyObject:
    return policy_object(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "GPUPolicy",
            "metadata": {"name": name, "uid": name, "generation": 1},
            "spec": {
                "match": {"kinds": ["Pod"]},
                "autogen": False,
                "validate": {"expression": expression, "message": f"{name} says no"},
            },
        }
    )


def overlay(name: str, *rules: dict[str, Any]) -> PolicyObject:
    return policy_object(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "GPUPolicyOverlay",
            "metadata": {"name": name, "uid": name, "generation": 1},
            "spec": {"rules": list(rules)},
        }
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    good = [
        gpupolicy(f"site-{i}", f"!has(object.metadata.labels) || !('site-{i}' in object.metadata.labels)")
        for i in range(10)
    ]
    ceiling = overlay("site-ceiling", {"name": "gpu-per-pod-ceiling", "params": {"defaultCeiling": 16}})
    broken = [gpupolicy(f"broken-{i}", "object.metadata.name ==") for i in range(10)]
    bad_overlay = overlay("bad-node-label", {"name": "gpu-node-affinity", "params": {"gpuNode": {"operator": "In"}}})
    configurations = {
        "all good": [*good, ceiling],
        "+ 1 broken GPUPolicy": [*good, broken[0], ceiling],
        "+ 10 broken GPUPolicies": [*good, *broken, ceiling],
        "+ 1 breaking overlay": [*good, ceiling, bad_overlay],
    }
    for name, objects in configurations.items():  # what each configuration leaves out, once
        load = isolated_load([RULES], objects)
        assert load.result.ruleset is not None, name
        print(f"{name}: {len(load.rejected)} left out, {load.rounds} loader runs")

    def run(objects: list[PolicyObject]) -> Callable[[], None]:
        def once() -> None:
            isolated_load([RULES], objects)

        return once

    runs = {name: run(objects) for name, objects in configurations.items()}
    print_ratios(time_in_turns(runs, args.rounds, args.iterations), "all good")


if __name__ == "__main__":
    main()
