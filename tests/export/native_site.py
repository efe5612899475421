"""The rules the export tests translate, as a site that runs them natively has them: not exceptable.

`export` keeps with the webhook every rule a GPUPolicyException may lift (webhook.export.EXCEPTABLE),
so a test about how rules translate first makes them not exceptable, as docs/native.md tells a site
to: in memory (`not_exceptable`), or with the GPUPolicyOverlay a site would write (`overlay_text`,
for tests that run the CLI). tests/export/test_exceptions.py proves the overlay path itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import yaml

from webhook.engine import RuleSet

OVERLAY_NAME = "site-runs-these-natively"
# --claims unresolved exports the counting rules only without annotation-marked GPU allocators (KAI
# Scheduler: the native count reads resources only; webhook.export.policies' allocator refusal)
NO_ALLOCATORS = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUWebhookConfig
metadata: {name: no-allocators}
spec:
  gpuAllocators: [{name: kai-scheduler, enabled: false}]
"""


def not_exceptable(ruleset: RuleSet) -> RuleSet:
    """The same rules with spec.exceptable false, and the same exceptions (none may name them)."""
    return RuleSet.build([replace(rule, exceptable=False) for rule in ruleset.rules], ruleset.env, ruleset.exceptions)


def overlay_text(rules: Iterable[str]) -> str:
    """A GPUPolicyOverlay that sets exceptable: false on each of `rules`."""
    return yaml.safe_dump(
        {
            "apiVersion": "gpu-webhook.io/v1alpha1",
            "kind": "GPUPolicyOverlay",
            "metadata": {"name": OVERLAY_NAME},
            "spec": {"rules": [{"name": name, "exceptable": False} for name in sorted(rules)]},
        },
        sort_keys=False,
    )
