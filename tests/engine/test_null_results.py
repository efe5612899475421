"""CEL results holding null must not wear down Python's reference count of None.

cel-expr-python 0.1.3's plain_value() releases None once per null it returns without taking a
reference; on Python 3.11 (the image's) that ends the process ("Fatal Python error:
none_dealloc") once as many nulls were returned as None had references. A mutation expression
giving null ("nothing to copy") is an ordinary rule, so the server must survive any number.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: copy-team}
spec:
  match: {kinds: [Pod], operations: [CREATE]}
  mutate:
    - setLabels:
        valueExpressions:
          team: "has(object.metadata.labels) && 'team' in object.metadata.labels ? dyn('x') : null"
          other: "dyn([null, {'a': null}][0])"
"""

SCRIPT = """\
import sys
from webhook.engine import AdmissionInput, Phase, evaluate, load_rules
ruleset = load_rules([sys.argv[1]]).ruleset
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
rounds = sys.getrefcount(None) + 1000  # past the point where None would be released for good
for _ in range(rounds):
    decision = evaluate(ruleset, AdmissionInput.offline(pod), phase=Phase.MUTATE)
    assert not decision.errors and not decision.patch, decision.errors
before = sys.getrefcount(None)
for _ in range(1000):
    evaluate(ruleset, AdmissionInput.offline(pod), phase=Phase.MUTATE)
print(rounds, sys.getrefcount(None) - before)
"""


def test_many_null_results_leave_none_alone(tmp_path: Path) -> None:
    (tmp_path / "rule.yaml").write_text(RULE)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rounds, drift = map(int, done.stdout.split())
    assert rounds > 1000
    assert abs(drift) < 50  # 1,000 evaluations, 3 nulls each: no steady loss


def test_the_export_runtime_gives_none_back_too() -> None:
    # The stand-in apiserver of the export tests evaluates exported policies on its own
    # environment (export/celenv.py); a drift is visible long before it would end the process.
    from webhook.export.celenv import NativeEnvironment

    environment = NativeEnvironment()
    program = environment.compile("[null, {'a': null}, object.missing]")
    variables = {"object": {"missing": None}}
    before = sys.getrefcount(None)
    for _ in range(1000):
        assert environment.evaluate(program, variables) == [None, {"a": None}, None]
    assert abs(sys.getrefcount(None) - before) < 50
