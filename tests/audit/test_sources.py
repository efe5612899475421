"""Every input form of `gpu-webhook audit PATH...`: files, directories, stdin, multi-document, List, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.audit.conftest import FIXTURES, RULES, WORKLOADS
from webhook.audit.sources import SourceError, read_manifests
from webhook.engine import NO_NAMESPACE_CONTEXT


def names(output: str) -> list[str]:
    return [f"{o['kind']}/{o['name']}" for o in json.loads(output)["objects"]]


def test_multi_document_file(run):
    code, out, _ = run(WORKLOADS, "--rules", RULES, "-o", "json")
    assert names(out) == ["Pod/trainer", "Pod/sneaky", "Job/finetune"]
    assert code == 1  # two Deny failures


def test_directory_is_recursive_and_reads_json_and_lists(run):
    _code, out, _ = run(str(FIXTURES / "tree"), "--rules", RULES, "-o", "json")
    # sorted walk: deployment.json, then nested/list.yaml's two items; notes.txt is not a manifest
    assert names(out) == ["Deployment/serve", "Pod/listed-1", "Pod/listed-2"]
    origins = [o["origin"] for o in json.loads(out)["objects"]]
    assert origins[1].endswith("list.yaml#0.items[0]")


def test_stdin(run):
    text = Path(WORKLOADS).read_text()
    _code, out, _ = run("-", "--rules", RULES, "-o", "json", stdin=text)
    assert names(out) == ["Pod/trainer", "Pod/sneaky", "Job/finetune"]
    assert json.loads(out)["objects"][0]["origin"] == "<stdin>#0"


def test_json_on_stdin_is_read_as_yaml(run):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}
    code, out, _ = run("-", "--rules", RULES, "-o", "json", stdin=json.dumps(pod))
    assert names(out) == ["Pod/p"] and code == 0


def test_streams_one_document_at_a_time(tmp_path):
    # the first object comes out before the broken third document is even parsed
    path = tmp_path / "m.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\n---\n: : [\n"
    )
    stream = read_manifests([str(path)])
    assert next(stream).object["metadata"]["name"] == "a"
    assert next(stream).object["metadata"]["name"] == "b"
    with pytest.raises(SourceError, match=r"m.yaml:\d+:\d+: invalid YAML"):
        next(stream)


def test_bad_input_is_a_usage_error(run, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    code, _, err = run(str(broken), "--rules", RULES, "-o", "json")
    assert code == 2 and "invalid YAML" in err
    code, _, err = run(str(tmp_path / "missing.yaml"), "--rules", RULES)
    assert code == 2 and "no such file" in err


def test_paths_and_cluster_are_exclusive(run):
    assert run("--rules", RULES)[0] == 2
    assert run(WORKLOADS, "--cluster", "--rules", RULES)[0] == 2
    assert run(WORKLOADS, "--apply", "--rules", RULES, "-o", "json")[0] == 2


def test_namespace_objects_feed_namespace_object(run, tmp_path):
    from tests.audit.conftest import NS_RULES

    namespaces = tmp_path / "ns.yaml"
    namespaces.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {gpu-access: none}}\n")
    _, out, _ = run(WORKLOADS, "--rules", NS_RULES, "-o", "json", "--namespace-objects", str(namespaces))
    trainer = json.loads(out)["objects"][0]
    assert [(r["rule"], r["result"]) for r in trainer["rules"]] == [("no-gpu-namespaces", "fail")]
    _, out, _ = run(WORKLOADS, "--rules", NS_RULES, "-o", "json")  # unknown namespace: said so, not "passed"
    trainer = json.loads(out)["objects"][0]
    assert trainer["rules"] == [] and trainer["notEvaluated"] == ["no-gpu-namespaces"]
    assert NO_NAMESPACE_CONTEXT in json.loads(out)["summary"]["notEvaluated"][0]["reason"]
