"""What GPUPolicyExceptions cost evaluate(): the default pack on a GPU pod's validation, as the server
runs it (no trace), with no exception, with N exceptions of other namespaces in the cluster context,
with N of the pod's namespace that do not cover it, and with one that covers it.

    python -m bench.exceptions [--exceptions 100] [--iterations 2000] [--rounds 5]

Every configuration runs in each round, in turn, on the same process: compare the ratios to "none"
(printed), not the absolute microseconds across runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from bench.interleaved import print_ratios, time_in_turns
from webhook.engine import AdmissionInput, ClusterContext, Phase, PolicyException, evaluate, load_rules

RULES = Path(__file__).resolve().parents[1] / "rules"


def gpu_pod() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "team-a", "labels": {"app": "train"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {
                        "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
                        "limits": {"memory": "32Gi", "nvidia.com/gpu": "1"},
                    },
                }
            ]
        },
    }


def exceptions(count: int, namespace: str, names: frozenset[str]) -> tuple[PolicyException, ...]:
    return tuple(
        PolicyException(
            name=f"e{index}",
            namespace=namespace,
            rules=frozenset({"gpu-container-resources"}),
            kinds=frozenset({"Pod"}),
            names=names,
            reason="bench",
        )
        for index in range(count)
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exceptions", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    ruleset = load_rules(RULES).require()
    n = args.exceptions
    configurations: dict[str, tuple[PolicyException, ...]] = {
        "none": (),
        f"{n} in other namespaces": exceptions(n, "team-b", frozenset()),
        f"{n} in its namespace, none covering it": exceptions(n, "team-a", frozenset({"other"})),
        "1 covering it": exceptions(1, "team-a", frozenset({"train"})),
    }

    def run(found: tuple[PolicyException, ...]) -> Callable[[], None]:
        context = ClusterContext(exceptions=found)

        def once() -> None:
            admission = AdmissionInput.offline(gpu_pod()).with_context(context)
            evaluate(ruleset, admission, phase=Phase.VALIDATE, trace=False)

        return once

    runs = {name: run(found) for name, found in configurations.items()}
    print_ratios(time_in_turns(runs, args.rounds, args.iterations), "none")


if __name__ == "__main__":
    main()
