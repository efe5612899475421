"""Every input in every report: what could not be read is an entry with its reason, in each format,
and stdin is read document by document so that one broken document loses only itself."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml

from tests.audit.conftest import RULES, documents

POD = """apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: team-a}
spec:
  containers: [{name: main, image: cuda:12, resources: {limits: {nvidia.com/gpu: 1}}}]
"""
# five documents on stdin: fine, broken (an unclosed flow map), fine, a duplicate key, fine
STREAM = "---\n".join(
    [
        POD % "first",
        POD % "second" + "  extra: {unclosed\n",
        POD % "third",
        POD % "fourth" + "kind: Pod\n",
        POD % "fifth",
    ]
)
BROKEN_LINE = 13  # where libyaml reading the whole stream stops (the `---` after the unclosed map), 1-based


def test_one_broken_document_on_stdin_loses_only_itself(run):
    code, out, err = run("-", "--rules", RULES, "-o", "json", stdin=STREAM)
    report = json.loads(out)
    assert [o["name"] for o in report["objects"]] == ["first", "third", "fifth"]
    assert [o["origin"] for o in report["objects"]] == ["<stdin>#0", "<stdin>#2", "<stdin>#4"]
    origins = [p["origin"] for p in report["inputProblems"]]
    assert len(origins) == 2 and origins[0].startswith(f"<stdin>:{BROKEN_LINE}:") and origins[1].startswith("<stdin>:")
    assert "duplicate key 'kind'" in report["inputProblems"][1]["reason"]
    assert report["summary"]["inputProblems"] == 2
    assert code == 2 and "2 inputs could not be read: the report lists them" in err
    assert "Traceback" not in err


def test_a_file_with_a_broken_document_keeps_the_others(run, tmp_path):
    manifest = tmp_path / "mixed.yaml"
    manifest.write_text(STREAM)
    _, out, _ = run(str(manifest), "--rules", RULES, "-o", "json")
    report = json.loads(out)
    assert [o["origin"] for o in report["objects"]] == [f"{manifest}#{i}" for i in (0, 2, 4)]
    assert report["inputProblems"][0]["origin"].startswith(f"{manifest}:{BROKEN_LINE}:")


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "a-binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00")
    (tmp_path / "b-broken.json").write_text('{"apiVersion": "v1", "kind": ')
    (tmp_path / "c-pods.yaml").write_text(STREAM)
    return tmp_path


def _origins(inputs):
    return [str(inputs / "a-binary.yaml"), str(inputs / "b-broken.json")]


def test_json_and_yaml_list_every_input_not_read(run, inputs):
    for output, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        code, out, _ = run(str(inputs), "--rules", RULES, "-o", output)
        report = load(out)
        problems = report["inputProblems"]
        assert [p["origin"] for p in problems][:2] == _origins(inputs) and len(problems) == 4, output
        assert "not UTF-8 text" in problems[0]["reason"] and "invalid JSON" in problems[1]["reason"]
        assert report["summary"]["inputProblems"] == 4 and len(report["objects"]) == 3 and code == 2


def test_table_says_where_each_problem_is(run, inputs):
    _, out, _ = run(str(inputs), "--rules", RULES, "-o", "table")
    assert f"{inputs / 'a-binary.yaml'}\n  PROBLEM not UTF-8 text" in out
    assert f"{inputs / 'b-broken.json'}\n  PROBLEM invalid JSON" in out
    assert "4 inputs could not be read (PROBLEM above)" in out
    _, summary, _ = run(str(inputs), "--rules", RULES, "-o", "table", "--summary")
    assert "PROBLEM not UTF-8" not in summary and "4 inputs could not be read" in summary


def test_policyreport_has_an_error_result_per_input_not_read(run, inputs):
    _, out, _ = run(str(inputs), "--rules", RULES, "-o", "policyreport")
    (cluster,) = [r for r in documents(out) if r["kind"] == "ClusterPolicyReport"]
    errors = [r for r in cluster["results"] if r["policy"] == "gpu-webhook-input"]
    assert [r["properties"]["origin"] for r in errors][:2] == _origins(inputs) and len(errors) == 4
    assert {r["result"] for r in errors} == {"error"} and cluster["summary"]["error"] == 4
    assert "not UTF-8 text" in errors[0]["message"]


def test_junit_has_an_error_case_per_input_not_read(run, inputs):
    _, out, _ = run(str(inputs), "--rules", RULES, "-o", "junit")
    root = ET.fromstring(out)
    (suite,) = [s for s in root.iter("testsuite") if s.get("name") == "input"]
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases][:2] == _origins(inputs) and len(cases) == 4
    assert suite.get("errors") == "4" and "invalid JSON" in cases[1].find("error").get("message")


def test_html_has_a_section_of_inputs_not_read(run, inputs):
    _, out, _ = run(str(inputs), "--rules", RULES, "-o", "html")
    assert "Inputs not read (4)" in out
    section = out[out.index("Inputs not read (4)") :]
    assert str(inputs / "a-binary.yaml") in section and "invalid JSON" in section


def test_with_jobs_the_problems_are_listed_the_same(run, inputs):
    (inputs / "d-more.yaml").write_text(POD % "more")
    one = run(str(inputs), "--rules", RULES, "-o", "json", "--jobs", "1")
    two = run(str(inputs), "--rules", RULES, "-o", "json", "--jobs", "2")
    assert one == two and len(json.loads(one[1])["inputProblems"]) == 4
