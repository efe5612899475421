"""What a ValidatingAdmissionPolicy costs a pod create, by its parts: `python -m bench.native_floor`.

One etcd + kube-apiserver (tests/support/envtest.py, $KUBEBUILDER_ASSETS) and the merged policy
`gpu-webhook export` writes for the pack, installed beside variants of it, each bound to a namespace
of its own (one term added to its namespaceSelector, as bench.apiserver_path does):

    none         no policy selects the namespace
    merged       the export's merged ValidatingAdmissionPolicy, as written
    no-messages  the same with each messageExpression replaced by a static message (the apiserver
                 runs every messageExpression of a policy on every request it evaluates)
    trivial      one validation `true`, the same matchConstraints: what any policy costs
    match-false  `trivial` with a matchCondition `false`: the policy matched, its validations skipped
    given        with `--policy FILE`: that ValidatingAdmissionPolicy (YAML), bound as `merged` is
                 (an earlier export's, say, to compare two in the same run)

Dry-run creates of the bench's GPU pod (`--creates` per variant in each of `--rounds`, the variants'
order rotated each round), one client. Per variant: p50, and the apiserver's time in its
ValidatingAdmissionPolicy plugin per create (apiserver_admission_controller_admission_duration_seconds).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path
from typing import Any

from bench.apiserver_path import (
    CLUSTER_FLAGS,
    NATIVE,
    RULES,
    TARGET,
    TENANT_ANNOTATIONS,
    TENANT_LABELS,
    apiserver_histogram,
    pod,
)
from tests.support.envtest import EnvTest
from webhook.engine import load_rules
from webhook.export import export
from webhook.kubeyaml import plain_documents

VARIANTS = ("none", "merged", "no-messages", "trivial", "match-false")


def merged_policy() -> tuple[dict[str, Any], dict[str, Any]]:
    """The pack's merged validating policy and binding (the one `manifests --native` installs)."""
    objects = export(load_rules(RULES).require()).objects
    policy = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy")
    binding = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding")
    return policy, binding


def variant(
    policy: dict[str, Any], binding: dict[str, Any], name: str, given: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    policy, binding = copy.deepcopy(given if name == "given" and given else policy), copy.deepcopy(binding)
    spec = policy["spec"]
    if name == "no-messages":
        for validation in spec["validations"]:
            validation.pop("messageExpression", None)
            validation["message"] = "refused"
    if name in ("trivial", "match-false"):
        spec.pop("variables", None)
        spec["validations"] = [{"expression": "true"}]
    if name == "match-false":
        spec["matchConditions"] = [{"name": "never", "expression": "false"}]
    selector = spec["matchConstraints"].setdefault("namespaceSelector", {})
    selector.setdefault("matchExpressions", []).append({"key": TARGET, "operator": "In", "values": [name]})
    policy["metadata"] = {"name": f"bench-{name}"}
    binding["metadata"] = {"name": f"bench-{name}"}
    binding["spec"]["policyName"] = f"bench-{name}"
    return [policy, binding]


def run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    policy, binding = merged_policy()
    given = plain_documents(args.policy.read_text())[0] if args.policy else None
    variants = VARIANTS + (("given",) if given else ())
    with EnvTest.start(apiserver_args=CLUSTER_FLAGS) as env:
        for name in variants:
            env.create_namespace(f"floor-{name}", {**TENANT_LABELS, TARGET: name}, TENANT_ANNOTATIONS)
            if name != "none":
                for obj in variant(policy, binding, name, given):
                    made = env.create(obj)
                    if not made.ok:
                        raise SystemExit(f"{obj['kind']}/{obj['metadata']['name']}: {made.status} {made.message}")
        time.sleep(3)  # the plugin's informers see the policies
        latencies: dict[str, list[float]] = {name: [] for name in variants}
        plugin: dict[str, float] = dict.fromkeys(variants, 0.0)
        for name in variants:  # warm-up
            for _ in range(args.warmup):
                env.dry_run_create(pod("gpu", f"floor-{name}"))
        for round_ in range(args.rounds):
            order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
            for name in order:
                body = pod("gpu", f"floor-{name}")
                before = apiserver_histogram(env).get(NATIVE, {}).get("sum", 0.0)
                for _ in range(args.creates):
                    began = time.perf_counter()
                    answer = env.dry_run_create(body)
                    latencies[name].append(time.perf_counter() - began)
                    if not answer.ok:
                        raise SystemExit(f"{name}: the GPU pod is refused: {answer.status} {answer.message}")
                plugin[name] += apiserver_histogram(env).get(NATIVE, {}).get("sum", 0.0) - before
        total = args.creates * args.rounds
        return {
            name: {"p50_ms": statistics.median(latencies[name]) * 1e3, "plugin_ms": plugin[name] / total * 1e3}
            for name in variants
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=50, help="creates per variant in each round (default 50)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds (default 4)")
    parser.add_argument("--policy", type=Path, help="a ValidatingAdmissionPolicy (YAML) to measure beside the export's")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured creates per variant first")
    figures = run(parser.parse_args())
    base = figures["none"]["p50_ms"]
    print("| variant | p50 ms | p50 over none | policy plugin ms/create |")
    print("|---|---:|---:|---:|")
    for name, row in figures.items():
        print(f"| {name} | {row['p50_ms']:.2f} | {row['p50_ms'] - base:+.2f} | {row['plugin_ms']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
