"""What NVIDIA_VISIBLE_DEVICES=void costs a CPU pod as a MutatingAdmissionPolicy: `python -m bench.void_native`.

The apiserver-native candidate for visible-devices-void (issue 39, item 2): a MutatingAdmissionPolicy
(admissionregistration.k8s.io/v1, GA in 1.36: KEP-3962) on Pod CREATEs without accelerators (the
registration's `requests-accelerators` CEL, negated, as its matchCondition) that adds the variable to
every container and init container lacking it. One kube-apiserver (envtest), no webhook; each
configuration in its own namespace, selected by its binding:

    none        no policy selects it
    apply       the policy as an ApplyConfiguration (server-side-apply merge: containers and env are
                lists keyed by name, so only the missing entry is added)
    jsonpatch   the same as a JSONPatch (one operation per container lacking it)
    empty       the policy's matchCondition true, its JSONPatch empty: matching and running a policy
    skipped     the policy's matchCondition `false`: matching alone

Dry-run creates of bench.apiserver_path's CPU pod over keep-alive HTTPS from one client; rounds
alternate the configurations. Prints each one's p50 over `none` (same run) and the apiserver's time in
its MutatingAdmissionPolicy plugin per create (`apiserver_admission_controller_admission_duration_seconds`).
Before timing it checks on the same apiserver that both forms give each probe pod the containers
visible-devices-void gives it (the variable added where missing, an existing entry left alone, a GPU
pod untouched). Writes bench/results/tmp/void-native-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import sys
import time
from typing import Any

import aiohttp

from bench.apiserver_path import RESULTS, batch, metrics_text, pod, run_on_envtest, save
from tests.support.envtest import EnvTest
from webhook.engine import KIND_TABLE, load_rules
from webhook.install.registration import requests_accelerators

VARIABLE, VALUE = "NVIDIA_VISIBLE_DEVICES", "void"
CONFIGS = ("none", "apply", "jsonpatch", "empty", "skipped")
PLUGIN = "MutatingAdmissionPolicy"
API = "admissionregistration.k8s.io/v1"


def _lacks(container: str) -> str:
    return f"!(has({container}.env) && {container}.env.exists(e, e.name == '{VARIABLE}'))"


def apply_configuration(field: str) -> str:
    """CEL: an apply configuration adding the variable to the containers of `field` that lack it."""
    entry = f"Object.spec.{field}.env{{name: '{VARIABLE}', value: '{VALUE}'}}"
    each = f"Object.spec.{field}{{name: c.name, env: [{entry}]}}"
    configuration = (
        f"Object{{spec: Object.spec{{{field}: object.spec.{field}.filter(c, {_lacks('c')}).map(c, {each})}}}}"
    )
    # an empty list would still be applied: only when some container lacks it
    return f"has(object.spec.{field}) && object.spec.{field}.exists(c, {_lacks('c')}) ? {configuration} : Object{{}}"


def json_patch(field: str) -> str:
    """CEL: one JSONPatch operation per container of `field` lacking the variable (names are unique)."""
    index = f"string(object.spec.{field}.map(x, x.name).indexOf(c.name))"
    base = f"'/spec/{field}/' + {index}"
    value = f"{{'name': '{VARIABLE}', 'value': '{VALUE}'}}"
    append = f"JSONPatch{{op: 'add', path: {base} + '/env/-', value: {value}}}"
    create = f"JSONPatch{{op: 'add', path: {base} + '/env', value: [{value}]}}"
    containers = f"(has(object.spec.{field}) ? object.spec.{field} : [])"
    return f"{containers}.filter(c, {_lacks('c')}).map(c, has(c.env) ? {append} : {create})"


EMPTY_PATCH = "[JSONPatch{op: 'test', path: '/kind', value: 'Pod'}].filter(p, false)"  # typed list(JSONPatch)


def policy(config: str, no_accelerators: str) -> list[dict[str, Any]]:
    """The policy and its binding of one configuration."""
    if config == "apply":
        mutations = [
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": apply_configuration(field)}}
            for field in ("initContainers", "containers")
        ]
    else:
        expression = (
            f"{json_patch('initContainers')} + {json_patch('containers')}" if config == "jsonpatch" else EMPTY_PATCH
        )
        mutations = [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]
    condition = {"empty": "true", "skipped": "false"}.get(config, no_accelerators)
    name = f"bench-void-{config}"
    return [
        {
            "apiVersion": API,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                    ]
                },
                "matchConditions": [{"name": "no-accelerators", "expression": condition}],
                "mutations": mutations,
            },
        },
        {
            "apiVersion": API,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "matchResources": {"namespaceSelector": {"matchLabels": {"bench": config}}}},
        },
    ]


def probes(namespace: str) -> dict[str, tuple[dict[str, Any], list[tuple[str, Any]]]]:
    """Probe pods and the (container, env) visible-devices-void leaves them with."""
    void = {"name": VARIABLE, "value": VALUE}
    mixed: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {
            "initContainers": [{"name": "fetch", "image": "busybox"}],
            "containers": [
                {"name": "main", "image": "x", "env": [{"name": VARIABLE, "value": "all"}]},
                {"name": "side", "image": "y", "env": [{"name": "B", "value": "2"}]},
            ],
        },
    }
    gpu = pod("gpu", namespace)
    gpu["spec"]["containers"].append({"name": "side", "image": "y"})
    return {
        "cpu": (pod("cpu", namespace), [("main", [void])]),
        "existing entries": (
            mixed,
            [
                ("fetch", [void]),
                ("main", [{"name": VARIABLE, "value": "all"}]),
                ("side", [{"name": "B", "value": "2"}, void]),
            ],
        ),
        "gpu": (gpu, [("main", None), ("side", None)]),  # its CPU sidecar stays the webhook's
    }


def check(env: EnvTest, config: str) -> None:
    """Until the policy acts, then every probe gives the containers the rule gives it."""
    namespace = f"bench-void-{config}"
    deadline = time.monotonic() + 30
    while not (answer := env.dry_run_create(pod("cpu", namespace))).ok or not answer.body["spec"]["containers"][0].get(
        "env"
    ):
        if time.monotonic() > deadline:
            raise SystemExit(f"{config}: the policy never acted ({answer.status} {answer.message})")
        time.sleep(0.3)
    for name, (body, expected) in probes(namespace).items():
        answer = env.dry_run_create(body)
        if not answer.ok:
            raise SystemExit(f"{config}, {name}: {answer.status} {answer.message}")
        spec = answer.body["spec"]
        found = [(c["name"], c.get("env")) for c in spec.get("initContainers", []) + spec["containers"]]
        if found != expected:
            raise SystemExit(f"{config}, {name}: {found}, visible-devices-void gives {expected}")


def plugin_seconds(env: EnvTest) -> float:
    total = 0.0
    for line in metrics_text(env).splitlines():
        if line.startswith(f"{'apiserver_admission_controller_admission_duration_seconds'}_sum{{") and (
            f'name="{PLUGIN}"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def measure(env: EnvTest, args: argparse.Namespace) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(env.ca_file))
    headers = {"Authorization": f"Bearer {env.token}", "Content-Type": "application/json"}
    latencies: dict[str, list[float]] = {c: [] for c in CONFIGS}
    plugin: dict[str, float] = dict.fromkeys(CONFIGS, 0.0)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, ssl=context)) as session:
        urls = {c: f"{env.url}/api/v1/namespaces/bench-void-{c}/pods?dryRun=All" for c in CONFIGS}
        bodies = {c: json.dumps(pod("cpu", f"bench-void-{c}")).encode() for c in CONFIGS}
        for config in CONFIGS:
            await batch(session, urls[config], bodies[config], headers, args.warmup, 1)
        for round_number in range(args.rounds):
            shift = round_number % len(CONFIGS)
            for config in CONFIGS[shift:] + CONFIGS[:shift]:
                before = plugin_seconds(env)
                found, _, failures = await batch(session, urls[config], bodies[config], headers, args.creates, 1)
                if failures:
                    raise SystemExit(f"{config}: {failures[0]}")
                plugin[config] += plugin_seconds(env) - before
                latencies[config] += found
    floor = statistics.median(latencies["none"])
    rows = []
    for config in CONFIGS:
        p50 = statistics.median(latencies[config])
        rows.append(
            {
                "config": config,
                "creates": len(latencies[config]),
                "p50_ms": p50,
                "p50_over_none_ms": p50 - floor,
                "p50_ratio_none": p50 / floor,
                "plugin_ms_per_create": plugin[config] / len(latencies[config]) * 1e3,
            }
        )
    return {"rows": rows}


def run(args: argparse.Namespace) -> dict[str, Any]:
    accelerators = load_rules(str(args.rules)).require().accelerators
    no_accelerators = f"!({requests_accelerators([KIND_TABLE.by_kind('Pod')], accelerators)})"
    with EnvTest.start(apiserver_args=("--allow-privileged=true",)) as env:
        for config in CONFIGS:
            env.create_namespace(f"bench-void-{config}", {"bench": config})
            for document in policy(config, no_accelerators) if config != "none" else []:
                made = env.create(document)
                if not made.ok:
                    raise SystemExit(f"{document['kind']} {config}: {made.status} {made.message}")
        for config in ("apply", "jsonpatch"):
            check(env, config)
        return asyncio.run(measure(env, args))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=50, help="creates per configuration in each round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rules", default="rules", help="the pack whose accelerators the condition names")
    args = parser.parse_args()
    result, meta = run_on_envtest("bench.void_native", run, args)
    result["meta"] = meta
    print("| config | creates | p50 ms | p50 over none | MutatingAdmissionPolicy plugin ms/create |")
    print("|---|---:|---:|---:|---:|")
    for row in result["rows"]:
        print(
            f"| {row['config']} | {row['creates']} | {row['p50_ms']:.2f} | {row['p50_over_none_ms']:+.2f} "
            f"({row['p50_ratio_none']:.2f}x) | {row['plugin_ms_per_create']:.2f} |"
        )
    save(RESULTS, "void-native", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
