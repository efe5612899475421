"""`explain -f` of a `kind: List` (kubectl get -o yaml) reads its items as audit does, and names stdin as audit does."""

from __future__ import annotations

import io

import yaml

from tests.authoring.conftest import BASIC_RULES as BASIC

BASIC_RULES = str(BASIC)

DENIED = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "cuda:12",
                "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            }
        ]
    },
}


def _list(*items: dict) -> str:
    return yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)}
    )


def test_a_list_of_one_object_is_explained_as_that_object(cli, tmp_path):
    listed = tmp_path / "list.yaml"
    listed.write_text(_list(DENIED))
    plain = tmp_path / "pod.yaml"
    plain.write_text(yaml.safe_dump(DENIED))
    code, out, _ = cli("explain", "-f", str(listed), "--rules", BASIC_RULES, "--no-color")
    assert code == 1 and "Decision: DENIED" in out and "gpu-requests-equal-limits" in out
    assert (code, out) == cli("explain", "-f", str(plain), "--rules", BASIC_RULES, "--no-color")[:2]


def test_a_list_with_a_namespace_gives_it_as_context(cli, tmp_path):
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    listed = tmp_path / "list.yaml"
    listed.write_text(_list(namespace, DENIED))
    code, out, err = cli("explain", "-f", str(listed), "--rules", BASIC_RULES, "--no-color")
    assert code == 1 and "Decision: DENIED" in out and "no namespace context" not in err


def test_a_list_of_several_objects_is_explained_item_by_item(cli, monkeypatch, tmp_path):
    allowed = {**DENIED, "metadata": {"name": "fine", "namespace": "team-a"}}
    allowed["spec"] = {"containers": [{"name": "main", "image": "cuda:12"}]}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    monkeypatch.setattr("sys.stdin", io.StringIO(_list(allowed, namespace, DENIED)))
    code, out, err = cli("explain", "-f", "-", "--rules", BASIC_RULES, "--no-color")
    assert code == 1, err  # one of them is denied
    headers = [text for text in out.splitlines() if text.startswith("Pod team-a/")]
    assert [h.split(" (")[0] for h in headers] == ["Pod team-a/fine", "Pod team-a/train"]
    assert [d for d in out.splitlines() if d.startswith("Decision:")] == [
        "Decision: allowed",
        "Decision: DENIED (1 violation)",
    ]
    single = tmp_path / "pod.yaml"
    single.write_text(yaml.safe_dump(DENIED))
    alone = cli("explain", "-f", str(single), "--rules", BASIC_RULES, "--no-color", "--namespace-objects", str(single))
    assert alone[1].strip() in out  # each item's story is its story alone


def test_priority_classes_and_runtime_classes_beside_the_object_are_context(cli, tmp_path):
    context = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "gpu-batch"}, "value": 1},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"}, "spec": {}},
    ]
    listed = tmp_path / "list.yaml"
    listed.write_text(_list(*context, DENIED))
    code, out, _ = cli("explain", "-f", str(listed), "--rules", BASIC_RULES, "--no-color")
    assert code == 1 and out.count("Decision:") == 1 and "Pod team-a/train" in out


def test_the_not_evaluated_rules_fold_into_one_line(cli, tmp_path):
    from tests.authoring.conftest import RULES

    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(DENIED))
    _, out, err = cli("explain", "-f", str(pod), "--rules", str(RULES), "--no-color")
    folded = [text for text in out.splitlines() if "not evaluated: no namespace context" in text]
    assert len(folded) == 2, folded  # the rules section's line and the decision's
    assert folded[0].lstrip().split(" rules not evaluated")[0].isdigit() and "kueue-queue-required" in folded[0]
    assert folded[1].strip().startswith("skipped ") and err.count("hint:") == 1


def test_stdin_is_named_as_audit_names_it(cli, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: [unclosed\n"))
    code, _, err = cli("explain", "-f", "-", "--rules", BASIC_RULES)
    assert code == 2 and "<stdin>:" in err and " -:" not in err
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: [unclosed\n"))
    code, out, err = cli("audit", "-", "--rules", BASIC_RULES, "-o", "json")
    assert code == 2 and '"origin":"<stdin>:2:1"' in out and "gpu-webhook: <stdin>:2:1:" in err
