"""Tally.merge: the counts of tallies kept apart (one per file in an `audit --jobs` worker) add up to
the counts of one tally that saw every object, including past the point where sequences of
outcomes are folded into counts per rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.audit.conftest import NS_RULES, PACK_RULES
from tests.support.manifests import mix
from webhook.audit import results as results_module
from webhook.audit.context import NamespaceContext
from webhook.audit.results import Tally, audit
from webhook.audit.sources import read_manifests
from webhook.commands.common import load_ruleset


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> list:
    root = tmp_path_factory.mktemp("mix")
    mix(root, 300)  # pods, Jobs, Deployments, PyTorchJobs in 37 namespaces
    ruleset = load_ruleset([Path(PACK_RULES), Path(NS_RULES)])
    namespaces = {"team-1": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-1"}}}
    return list(audit(ruleset, read_manifests([str(root)]), NamespaceContext(namespaces)))


@pytest.mark.parametrize("parts", [1, 2, 7])
def test_merged_tallies_count_what_one_tally_counts(audited: list, parts: int, monkeypatch) -> None:
    whole = Tally()
    for result in audited:
        whole.add(result)
    monkeypatch.setattr(results_module, "_SIGNATURES", 5)  # fold often: merged counts come from both places
    merged = Tally()
    size = -(-len(audited) // parts)
    for start in range(0, len(audited), size):
        part = Tally()
        for result in audited[start : start + size]:
            part.add(result)
        merged.merge(part)
    assert merged.as_dict() == whole.as_dict()
    assert merged.failed("deny") == whole.failed("deny") and merged.failed("warn") == whole.failed("warn")
    assert whole.as_dict()["gpusAffected"] and whole.as_dict()["patchedObjects"]  # the counts are not all zero
