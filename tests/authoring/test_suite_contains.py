"""Expectations that survive the rest of the pack (issue 29): `objectMatch: contains` and `patchContains`.

A rule's suite written when it stood alone must still pass once other rules join the pack: a
toleration another rule added sits beside this rule's in the list, and this rule then appends
(`/spec/tolerations/-`) instead of creating the list (`/spec/tolerations`).
"""

from __future__ import annotations

from webhook.authoring.suite import add_leaves, contains, is_subset

TOLERATIONS = [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists", "effect": "NoSchedule"}]


def test_contains_finds_list_items_anywhere_and_subset_does_not():
    expected = {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}
    actual = {"spec": {"tolerations": TOLERATIONS, "containers": []}}
    assert contains(expected, actual)
    assert not is_subset(expected, actual)  # positional: the lists differ in length
    assert not contains({"spec": {"tolerations": [{"key": "c"}]}}, actual)
    assert not contains({"spec": {"tolerations": [{"key": "b", "operator": "Equal"}]}}, actual)
    assert contains({"spec": {"tolerations": []}}, actual)
    assert not contains({"spec": {"tolerations": [{"key": "a"}]}}, {"spec": {"tolerations": {"key": "a"}}})


def test_an_add_counts_as_the_adds_of_its_items_and_entries():
    assert add_leaves({"op": "add", "path": "/spec/tolerations", "value": TOLERATIONS}) == [
        {"op": "add", "path": "/spec/tolerations/-", "value": TOLERATIONS[0]},
        {"op": "add", "path": "/spec/tolerations/-", "value": TOLERATIONS[1]},
    ]
    assert add_leaves({"op": "add", "path": "/metadata/labels", "value": {"a/b": "x", "c": "y"}}) == [
        {"op": "add", "path": "/metadata/labels/a~1b", "value": "x"},
        {"op": "add", "path": "/metadata/labels/c", "value": "y"},
    ]
    replace = {"op": "replace", "path": "/metadata/labels", "value": {"c": "y"}}
    assert add_leaves(replace) == [replace]


RULE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  match: {{kinds: [Pod], operations: [CREATE]}}
  mutate:
    - addToleration: {{key: {key}, operator: Exists, effect: NoSchedule}}
    - setLabels: {{values: {{{key}: "on"}}}}
"""

SUITE = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicyTest
metadata: {name: zz-toleration}
spec:
  rules: ../rules
  cases:
    - name: adds its toleration
      object: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: a}, spec: {containers: []}}
      expect:
        rules:
          - rule: zz-toleration
            result: mutated
            patchContains:
              - {op: add, path: /spec/tolerations, value: [{key: zz, effect: NoSchedule}]}
              - {op: add, path: /metadata/labels, value: {zz: "on"}}
        object: {spec: {tolerations: [{key: zz, operator: Exists}]}, metadata: {labels: {zz: "on"}}}
        objectMatch: contains
        patchContains:
          - {op: add, path: /spec/tolerations/-, value: {key: zz}}
"""


def test_per_rule_expectations_survive_a_rule_joining_the_pack(cli, write, tmp_path):
    write("rules/zz.yaml", RULE.format(name="zz-toleration", key="zz"))
    write("suites/zz.test.yaml", SUITE)
    code, out, _ = cli("test", str(tmp_path / "suites"))
    assert code == 0, out
    # a rule that runs first (pack order): the list and the labels exist when zz-toleration runs
    write("rules/aa.yaml", RULE.format(name="aa-toleration", key="aa"))
    code, out, _ = cli("test", str(tmp_path / "suites"))
    assert code == 0, out
    # the positional forms do not survive it: that is what the new ones are for
    exact = SUITE.replace("objectMatch: contains", "objectMatch: subset").replace(
        "patchContains:\n       ", "patch:\n       "
    )
    write("suites/zz.test.yaml", exact)
    code, out, _ = cli("test", str(tmp_path / "suites"))
    assert code == 1
    assert "patch differs" in out and "does not contain the expected fields" in out


def test_a_missing_operation_or_item_fails_with_what_is_missing(cli, write, tmp_path):
    write("rules/zz.yaml", RULE.format(name="zz-toleration", key="zz"))
    write(
        "suites/zz.test.yaml",
        SUITE.replace("{key: zz, effect: NoSchedule}]}", "{key: zz, effect: NoExecute}]}").replace(
            "tolerations: [{key: zz, operator: Exists}]", "tolerations: [{key: yy}]"
        ),
    )
    code, out, _ = cli("test", str(tmp_path / "suites"))
    assert code == 1
    assert "rule zz-toleration: its patch does not contain 1 of the expected operations:" in out
    assert "+    effect: NoSchedule" in out or "effect: NoExecute" in out
    assert "the object after mutation does not contain the expected fields and list items:" in out
