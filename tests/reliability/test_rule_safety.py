"""Rules cannot hurt the server: cost limits, a per-request time budget, failurePolicy, RE2, safe YAML.

Each test names the attack it stands for in docs/security.md ("a broken or hostile rule").
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support import cpu_pod, gpu_pod, make_review, start_server
from webhook.engine import AdmissionInput, Limits, Phase, RuleSet, evaluate, load_rules
from webhook.engine.resources import DEFAULT

POLICY = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: {policy}
  match: {{kinds: [Pod]{condition}}}
  validate: {{expression: {expression!r}, message: "rule says no"}}
"""


def ruleset(tmp_path: Path, expression: str, policy: str = "Fail", condition: str | None = None, name: str = "r"):
    text = POLICY.format(
        name=name,
        policy=policy,
        expression=expression,
        condition=f", condition: {condition!r}" if condition else "",
    )
    (tmp_path / f"{name}.yaml").write_text(text)
    result = load_rules(tmp_path)
    assert result.ok, [str(e) for e in result.errors]
    return result.ruleset


def load_errors(tmp_path: Path, text: str) -> list[str]:
    (tmp_path / "rule.yaml").write_text(text)
    result = load_rules(tmp_path)
    assert not result.ok
    return [str(e) for e in result.errors]


def pod_input(pod: dict) -> AdmissionInput:
    return AdmissionInput(object=pod, kind="Pod", namespace="team-a")


# -- failurePolicy --------------------------------------------------------------------------------


def test_rule_error_with_fail_denies_with_a_clear_message(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, "object.spec.noSuchField == 1", policy="Fail")
    decision = evaluate(rules, pod_input(cpu_pod()))
    assert not decision.allowed
    assert "rule r could not be evaluated" in decision.denial_message
    assert "noSuchField" in decision.denial_message


def test_rule_error_with_ignore_allows_and_records_the_error(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, "object.spec.noSuchField == 1", policy="Ignore")
    decision = evaluate(rules, pod_input(cpu_pod()))
    assert decision.allowed
    assert decision.errors and decision.errors[0].rule == "r"


@pytest.mark.parametrize(("policy", "allowed"), [("Fail", False), ("Ignore", True)])
def test_a_failing_match_condition_follows_failure_policy_not_no_match(
    tmp_path: Path, policy: str, allowed: bool
) -> None:
    # A tenant must not escape a Fail rule by shaping the object so that its condition errors.
    rules = ruleset(tmp_path, "false", policy=policy, condition="object.spec.noSuchField == 1")
    decision = evaluate(rules, pod_input(cpu_pod()))
    assert decision.allowed is allowed
    assert decision.errors and "condition" in decision.errors[0].message


async def test_ignored_rule_errors_are_counted_in_metrics(tmp_path: Path, cert_dir: Path) -> None:
    import aiohttp

    from tests.support import LiveServer, client_ssl

    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    ruleset(rules_dir, "object.spec.noSuchField == 1", policy="Ignore", name="flaky")
    server = await start_server(cert_dir, rules_dir)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
            live = LiveServer(server, session)
            for _ in range(3):
                answer = await live.review("validate", make_review(cpu_pod()))
                assert answer["response"]["allowed"] is True
            metrics = (await live.get("/metrics"))[1]
        assert 'gpu_webhook_rule_evaluation_errors_total{rule="flaky"} 3.0' in metrics
    finally:
        await server.stop()


# -- cost limits ------------------------------------------------------------------------------------


def test_deeply_nested_comprehensions_are_rejected_at_load(tmp_path: Path) -> None:
    nested = "object.spec.containers.all(a, object.spec.containers.all(b, object.spec.containers.all(c, object.spec.containers.all(d, true))))"
    errors = load_errors(tmp_path, POLICY.format(name="deep", policy="Fail", expression=nested, condition=""))
    assert any("comprehensions nested 4 deep" in e for e in errors), errors


def test_replace_with_a_computed_replacement_is_rejected_at_load(tmp_path: Path) -> None:
    # x.replace('a', x) squares the string's size; chained three times on a 200-byte name it is 1.6 GB.
    expression = "object.metadata.name.replace('a', object.metadata.name).size() > 0"
    errors = load_errors(tmp_path, POLICY.format(name="grow", policy="Fail", expression=expression, condition=""))
    assert any("replace()" in e and "literal" in e for e in errors), errors


def test_literal_replace_and_the_default_pack_pass_the_cost_check(tmp_path: Path, pack: RuleSet) -> None:
    ruleset(tmp_path, "object.metadata.name.replace('-', '_') != ''")
    assert pack.rules  # the session's load of the default pack ran the same cost check


def test_time_budget_exceeded_is_a_rule_error_under_its_policy(tmp_path: Path) -> None:
    rules = ruleset(tmp_path, "true", policy="Fail")
    decision = evaluate(rules, pod_input(cpu_pod()), limits=Limits(time_budget=0.0))
    assert not decision.allowed
    assert "time budget" in decision.denial_message
    ignore_dir = tmp_path / "ignore"
    ignore_dir.mkdir()
    rules = ruleset(ignore_dir, "true", policy="Ignore")
    decision = evaluate(rules, pod_input(cpu_pod()), limits=Limits(time_budget=0.0))
    assert decision.allowed and "time budget" in decision.errors[0].message


def test_oversized_collection_is_refused_fast_under_the_rules_policy(pack: RuleSet) -> None:
    # map()/filter() results grow quadratically in this runtime: 4,000 items cost ~0.2 s per expression.
    pod = cpu_pod()
    pod["spec"]["containers"] = [
        {"name": f"c{i}", "image": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
        for i in range(8000)
    ]
    started = time.perf_counter()
    decision = evaluate(pack, pod_input(pod))
    assert time.perf_counter() - started < 0.5
    assert not decision.allowed
    assert any("too large to evaluate" in e.message for e in decision.errors), decision.errors


def test_huge_quantity_exponent_is_not_a_gpu_count_and_costs_nothing() -> None:
    # int(Decimal("1e1000000")) takes ~30 s; "1e999999999" never finishes. A tenant writes the string.
    started = time.perf_counter()
    for value in ("1e1000000", "1e999999999", "1E18E", "9" * 64):
        assert DEFAULT.container_count({"resources": {"limits": {"nvidia.com/gpu": value}}}) == 0
    assert time.perf_counter() - started < 0.1


def test_huge_quantity_through_the_default_pack_is_fast(pack: RuleSet) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1e999999999"}}
    started = time.perf_counter()
    evaluate(pack, pod_input(pod), Phase.ALL)
    assert time.perf_counter() - started < 0.5


# -- regular expressions ---------------------------------------------------------------------------


def test_catastrophic_regex_in_a_rule_runs_in_linear_time(tmp_path: Path) -> None:
    # (a+)+$ against "aaaa...!" backtracks for ages in a backtracking engine; RE2 answers at once.
    rules = ruleset(tmp_path, "!object.metadata.name.matches('(a+)+$')", policy="Fail")
    pod = cpu_pod(name="a" * 100_000 + "!")
    started = time.perf_counter()
    decision = evaluate(rules, pod_input(pod))
    assert time.perf_counter() - started < 0.5
    assert decision.allowed


# -- YAML --------------------------------------------------------------------------------------------


def test_python_object_tags_are_rejected(tmp_path: Path) -> None:
    text = POLICY.format(name="evil", policy="Fail", expression="true", condition="").replace(
        'message: "rule says no"', "message: !!python/object/apply:os.system ['touch /tmp/pwned-by-rule']"
    )
    errors = load_errors(tmp_path, text)
    assert any("python/object" in e for e in errors), errors
    assert not Path("/tmp/pwned-by-rule").exists()


BILLION_LAUGHS = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: laughs}
spec:
  match: {kinds: [Pod]}
  mutate:
    - merge:
        metadata:
          annotations:
            a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
            b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
            c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
            d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
            e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
            f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
            g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
            h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
            i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_billion_laughs_is_refused_at_load_not_expanded_per_request(tmp_path: Path) -> None:
    started = time.perf_counter()
    errors = load_errors(tmp_path, BILLION_LAUGHS)
    assert time.perf_counter() - started < 2
    assert any("aliases" in e for e in errors), errors


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    text = BILLION_LAUGHS.split("        metadata:")[0] + "        metadata: &m {labels: *m}\n"
    errors = load_errors(tmp_path, text)
    assert any("alias" in e for e in errors), errors
