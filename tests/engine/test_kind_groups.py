"""Kind groups: a rule names `{kindGroup: NAME}` in match.kinds, and the kind table says which kinds it is."""

from __future__ import annotations

from pathlib import Path

from webhook.engine import KIND_TABLE, load_rules
from webhook.engine.workloads import KIND_GROUPS, KINDS

REPO = Path(__file__).resolve().parents[2]
HEADER = "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\n"

# The kinds the four queue rules listed by name before they named the group (JAXJob joined the table later)
KUEUE_LISTED = {
    "Job", "JobSet", "MPIJob", "PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "RayJob", "RayCluster",
    "RayService", "AppWrapper", "TrainJob", "Deployment", "StatefulSet", "LeaderWorkerSet", "Pod",
}  # fmt: skip
DRA = {"ResourceClaim", "ResourceClaimTemplate"}
# every rule's match.kinds as the pack wrote them before the groups: rules not named here list [Pod]
MATCHED_BEFORE: dict[str, set[str]] = {
    "dra-claim-limits": DRA,
    "dra-device-classes-allowed": {"Pod", *DRA},
    "mig-profiles": {"Pod", *DRA},
    "no-timeslicing-in-production": {"Pod", *DRA},
    "dra-pod-claims-resolvable": {"Pod", "ResourceClaimTemplate"},
    "kueue-priority-class-allowed": KUEUE_LISTED,
    "kueue-priority-class": KUEUE_LISTED,
    "kueue-queue-name": KUEUE_LISTED,
    "kueue-queue-required": KUEUE_LISTED,
    "cpu-workload-in-gpu-only-queue": KUEUE_LISTED,  # new with the group: it never listed kinds
}


def test_every_rule_of_the_pack_matches_the_kinds_it_listed_before_the_groups() -> None:
    result = load_rules(REPO / "rules")
    assert result.ruleset is not None, result.errors
    rules = result.ruleset.rules
    assert len(rules) == 33
    for rule in rules:
        expected = MATCHED_BEFORE.get(rule.name, {"Pod"})
        assert set(rule.match.kinds) - {"JAXJob"} == expected, rule.name


def test_the_queue_rules_name_the_group_not_the_kinds() -> None:
    for name in ("kueue-priority-class-allowed", "kueue-priority-class", "kueue-queue-name", "kueue-queue-required"):
        text = (REPO / "rules" / f"{name}.yaml").read_text()
        assert "kinds: [{kindGroup: KueueWorkloads}]" in text, name
        assert "LeaderWorkerSet, Pod]" not in text, name


def test_a_group_is_the_kinds_whose_rows_name_it_and_each_group_is_described() -> None:
    assert set(KIND_TABLE.group("KueueWorkloads")) == {k.kind for k in KINDS if "KueueWorkloads" in k.groups}
    assert set(KIND_TABLE.group("KueueWorkloads")) == KUEUE_LISTED | {"JAXJob"}
    assert set(KIND_TABLE.groups) == set(KIND_GROUPS)
    assert KIND_TABLE.group("NoSuchGroup") == ()


def test_a_group_and_named_kinds_together_match_both(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        HEADER + "metadata: {name: r}\nspec:\n  match:\n    kinds: [CronJob, {kindGroup: KueueWorkloads}]\n"
        "  validate: {expression: 'true'}\n"
    )
    result = load_rules(tmp_path)
    assert result.ruleset is not None, result.errors
    (rule,) = result.ruleset.rules
    assert set(rule.match.kinds) == set(KIND_TABLE.group("KueueWorkloads")) | {"CronJob"}
    assert rule.match.declared == ()


def test_an_unknown_group_is_refused_where_it_is_written(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        HEADER + "metadata: {name: r}\nspec:\n  match:\n    kinds: [{kindGroup: KueueJobs}]\n"
        "  validate: {expression: 'true'}\n"
    )
    result = load_rules(tmp_path)
    assert result.ruleset is None
    (error,) = [str(e).replace(str(tmp_path) + "/", "") for e in result.errors]
    assert error == "r.yaml:6:25: rule r: spec.match.kinds[0].kindGroup: 'KueueJobs' is not one of: KueueWorkloads"
