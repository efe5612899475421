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


def test_a_list_of_several_objects_is_refused_with_its_count(cli, monkeypatch):
    other = {**DENIED, "metadata": {"name": "other", "namespace": "team-a"}}
    monkeypatch.setattr("sys.stdin", io.StringIO(_list(DENIED, other)))
    code, _, err = cli("explain", "-f", "-", "--rules", BASIC_RULES)
    assert code == 2 and "<stdin>: expected one object (and optionally its Namespace), found 2" in err


def test_stdin_is_named_as_audit_names_it(cli, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: [unclosed\n"))
    code, _, err = cli("explain", "-f", "-", "--rules", BASIC_RULES)
    assert code == 2 and "<stdin>:" in err and " -:" not in err
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: [unclosed\n"))
    code, out, err = cli("audit", "-", "--rules", BASIC_RULES, "-o", "json")
    assert code == 2 and '"origin":"<stdin>:2:1"' in out and "gpu-webhook: <stdin>:2:1:" in err
