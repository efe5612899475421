"""GPUPolicyExceptions in the input of audit and explain are context, as in the cluster: from where they appear
they let their own namespace's objects through the rules they name; a broken one is an input problem."""

from __future__ import annotations

import json
from pathlib import Path

from tests.audit.conftest import PACK_RULES

EXCEPTION = """apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyException
metadata: {name: bench-burst, namespace: team-a}
spec:
  rules: [gpu-requests-equal-limits]
  match: {kinds: [Pod], names: [burst]}
  reason: burstable GPUs for one benchmark
"""
# requests 1 GPU, limits 2: gpu-requests-equal-limits denies it
POD = """apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  containers:
    - name: main
      image: cuda:12
      resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "2"}}
"""


def _results(out: str, rule: str) -> dict[str, tuple[str, list[str]]]:
    return {
        f"{o['namespace']}/{o['name']}": (r["result"], r["messages"])
        for o in json.loads(out)["objects"]
        for r in o["rules"]
        if r["rule"] == rule
    }


def test_an_exception_in_the_input_lets_only_its_namespace_and_names_through(run, tmp_path: Path) -> None:
    manifest = tmp_path / "in.yaml"
    manifest.write_text(
        "---\n".join([POD % ("before", "team-a"), EXCEPTION, POD % ("burst", "team-a"), POD % ("burst", "team-b")])
        + "---\n"
        + POD % ("other", "team-a")
    )
    code, out, err = run(str(manifest), "--rules", PACK_RULES, "-o", "json")
    results = _results(out, "gpu-requests-equal-limits")
    assert results["team-a/burst"] == (
        "excepted",
        ["excepted by team-a/bench-burst: burstable GPUs for one benchmark"],
    )
    assert results["team-b/burst"][0] == "fail"  # another namespace: the exception is not its own
    assert results["team-a/other"][0] == "fail"  # another name
    assert "GPUPolicyException" not in out  # context, not an audited object
    assert code == 1, err


def test_a_broken_exception_in_the_input_is_an_input_problem(run, tmp_path: Path) -> None:
    manifest = tmp_path / "in.yaml"
    manifest.write_text(
        "---\n".join([EXCEPTION.replace("  reason: burstable GPUs for one benchmark\n", ""), POD % ("burst", "team-a")])
    )
    code, out, _ = run(str(manifest), "--rules", PACK_RULES, "-o", "json")
    report = json.loads(out)
    assert _results(out, "gpu-requests-equal-limits")["team-a/burst"][0] == "fail"
    (problem,) = report["inputProblems"]
    assert "bench-burst" in problem["origin"] + problem["reason"] and "reason" in problem["reason"]
    assert "not applied" in problem["reason"]
    assert code == 2


def test_jobs_keep_an_input_with_exceptions_in_order(run, tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(EXCEPTION)
    second.write_text(POD % ("burst", "team-a"))
    outputs = [run(str(first), str(second), "--rules", PACK_RULES, "-o", "json", "--jobs", jobs)[1] for jobs in "12"]
    assert outputs[0] == outputs[1]
    assert _results(outputs[1], "gpu-requests-equal-limits")["team-a/burst"][0] == "excepted"


def test_explain_applies_an_exception_beside_the_object(cli_main, tmp_path: Path) -> None:
    manifest = tmp_path / "one.yaml"
    manifest.write_text("---\n".join([EXCEPTION, POD % ("burst", "team-a")]))
    _, out, _ = cli_main("explain", "-f", str(manifest), "--rules", PACK_RULES, "--no-color")
    assert (
        "excepted [gpu-requests-equal-limits] excepted by team-a/bench-burst: burstable GPUs for one benchmark" in out
    )
    # the same object without the exception is denied by the rule
    manifest.write_text(POD % ("burst", "team-a"))
    _, alone, _ = cli_main("explain", "-f", str(manifest), "--rules", PACK_RULES, "--no-color")
    assert "excepted by" not in alone
    assert "gpu-requests-equal-limits" in alone.split("Decision:")[1]  # now among the violations


def test_explain_refuses_a_broken_exception_beside_the_object(cli_main, tmp_path: Path) -> None:
    manifest = tmp_path / "one.yaml"
    broken = EXCEPTION.replace("  reason: burstable GPUs for one benchmark\n", "")
    manifest.write_text("---\n".join([broken, POD % ("burst", "team-a")]))
    code, _, err = cli_main("explain", "-f", str(manifest), "--rules", PACK_RULES)
    assert code == 2
    assert "bench-burst" in err and "'reason' is a required property" in err
