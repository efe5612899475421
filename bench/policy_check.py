"""What the `/policies` check of one GPUPolicy apply costs (webhook/policies/admission.py `problems`: lint of
the pack with the new object), in the long-lived check process, against the same check done as a cold
one: every rule file parsed again and the pack's GPUPolicyTest suites linted too.

    python -m bench.policy_check [--iterations 3] [--rounds 5]

Both run in turns in one process (the CEL programs compiled once for all): compare the ratio, not the
absolute milliseconds across runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.interleaved import print_ratios, time_in_turns
from webhook.authoring import lint as lint_module
from webhook.kube.policyobjects import policy_object
from webhook.policies.admission import problems

RULES = str(Path(__file__).resolve().parents[1] / "rules")
CANDIDATE = {
    "apiVersion": "gpu-webhook.io/v1alpha1",
    "kind": "GPUPolicy",
    "metadata": {"name": "site-no-x", "uid": "u", "generation": 1},
    "spec": {
        "match": {"kinds": ["Pod"], "operations": ["CREATE"]},
        "validate": {"expression": "object.metadata.name != 'x'", "message": "no x"},
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    def warm() -> None:
        assert problems(CANDIDATE, [RULES], []) == []

    def cold() -> None:
        lint_module._PARSED.clear()  # every file parsed again, as each check did before the cache
        candidate = policy_object(CANDIDATE)
        found = lint_module.lint([RULES], [candidate.document], suites=True)
        assert not [e for e in found if candidate.label in str(e)]

    timings = time_in_turns(
        {"check (cached parse, no suites)": warm, "cold (parse all, suites)": cold}, args.rounds, args.iterations
    )
    print_ratios(timings, "cold (parse all, suites)")


if __name__ == "__main__":
    main()
