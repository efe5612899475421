"""`gpu-webhook audit --cluster` against the stand-in API server, and `--apply` of PolicyReports."""

from __future__ import annotations

import json

from tests.audit.conftest import NS_RULES, RULES, documents


def objects(out: str) -> list[str]:
    return [f"{o['kind']}/{o['namespace']}/{o['name']}" for o in json.loads(out)["objects"]]


def test_lists_every_served_kind_page_by_page(run, stub, kubeconfig):
    code, out, err = run("--cluster", "--kubeconfig", kubeconfig, "--rules", RULES, "-o", "json", "--page-size", "2")
    assert objects(out) == [
        "Pod/team-a/gpu-0",
        "Pod/team-a/gpu-1",
        "Pod/team-a/gpu-2",
        "Pod/team-b/sneaky",  # job-pod is skipped: its Job's template is audited
        "Job/team-a/train",
        "PyTorchJob/team-b/llama",
    ]
    pod_requests = [r for r in stub.requests if r.startswith("GET /api/v1/pods")]
    assert len(pod_requests) == 3 and "continue=" in pod_requests[1]  # 5 pods, 2 per page
    assert all("limit=2" in r for r in pod_requests)
    # the cluster's policy objects and context first (Namespaces first of the context), then the kinds;
    # JobSet, Ray and LeaderWorkerSet are not served (404) and skipped
    context = [r for r in stub.requests if "/gpu-webhook.io/" not in r]
    assert context[0].startswith("GET /api/v1/namespaces")
    assert any("/apis/ray.io/v1/rayjobs" in r for r in stub.requests)
    # stderr is no terminal: no progress bar, only the line naming the rules
    assert code == 0 and len(err.splitlines()) == 1 and " rules from " in err, err


def test_objects_get_apiversion_kind_and_their_namespace_object(run, stub, kubeconfig):
    _, out, _ = run("--cluster", "--kubeconfig", kubeconfig, "--rules", NS_RULES, "-o", "json")
    results = {f"{o['namespace']}/{o['name']}": o for o in json.loads(out)["objects"]}
    assert results["team-b/sneaky"]["apiVersion"] == "v1"
    assert [r["rule"] for r in results["team-b/sneaky"]["rules"]] == ["no-gpu-namespaces"]  # gpu-access: none
    assert results["team-a/gpu-0"]["rules"] == []


def test_namespace_scope_and_owned_pods(run, stub, kubeconfig):
    _, out, _ = run(
        "--cluster", "--kubeconfig", kubeconfig, "--rules", RULES, "-o", "json", "-n", "team-a", "--include-owned"
    )
    assert objects(out) == [
        "Pod/team-a/gpu-0",
        "Pod/team-a/gpu-1",
        "Pod/team-a/gpu-2",
        "Pod/team-a/job-pod",
        "Job/team-a/train",
    ]
    assert "GET /api/v1/namespaces/team-a" in stub.requests
    assert any(r.startswith("GET /api/v1/namespaces/team-a/pods") for r in stub.requests)


def test_unknown_namespace_and_unreachable_cluster_are_usage_errors(run, stub, kubeconfig, tmp_path):
    code, _, err = run("--cluster", "--kubeconfig", kubeconfig, "--rules", RULES, "-n", "nope")
    assert code == 2 and "namespace nope not found" in err
    code, _, err = run("--cluster", "--kubeconfig", str(tmp_path / "missing"), "--rules", RULES)
    assert code == 2


def test_table_summarises_by_rule_and_namespace_with_gpus(run, stub, kubeconfig):
    _, out, _ = run("--cluster", "--kubeconfig", kubeconfig, "--rules", RULES, "-o", "table", "--summary")
    assert "6 objects:" in out and "GPUs requested: 12" in out
    assert any(line.split()[:1] == ["team-b"] for line in out.splitlines())


def test_apply_creates_then_replaces_policy_reports(run, stub, kubeconfig):
    args = ("--cluster", "--kubeconfig", kubeconfig, "--rules", RULES, "-o", "policyreport", "--apply")
    code, out, err = run(*args)
    assert code == 0
    assert "PolicyReport team-a/gpu-webhook-audit created" in err
    stored = stub.reports[("policyreports", "team-a", "gpu-webhook-audit")]
    printed = next(d for d in documents(out) if d["metadata"]["namespace"] == "team-a")
    assert stored["results"] == printed["results"]
    first_version = stored["metadata"]["resourceVersion"]
    _, _, err = run(*args)
    assert "PolicyReport team-b/gpu-webhook-audit replaced" in err
    assert (
        stub.reports[("policyreports", "team-a", "gpu-webhook-audit")]["metadata"]["resourceVersion"] != first_version
    )
    assert any(
        r.startswith("PUT /apis/wgpolicyk8s.io/v1alpha2/namespaces/team-a/policyreports/") for r in stub.requests
    )


def test_context_and_progress_bar_on_a_terminal(run, stub, kubeconfig, monkeypatch):
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    _, out, _ = run("--cluster", "--kubeconfig", kubeconfig, "--context", "stub", "--rules", RULES, "-o", "json")
    assert len(json.loads(out)["objects"]) == 6
    assert "auditing" in terminal.getvalue()  # drawn on stderr only; stdout stays clean JSON
    assert "JobSet: not served by this cluster, skipped" in terminal.getvalue()


def test_pages_are_read_as_the_audit_goes_never_gathered(stub, kubeconfig):
    # memory holds one page: the next page is asked for only when the audit has used this one up
    from webhook.audit import cluster

    api = cluster.Api(cluster.connect(kubeconfig, None))
    pods = cluster.Resource("", ("v1",), "pods", "Pod")
    items = cluster.read_workloads(api, include_owned=True, limit=2, resources=[pods])
    before = len(stub.requests)

    def pages_asked() -> int:
        return sum(r.startswith("GET /api/v1/pods") for r in stub.requests[before:])

    assert pages_asked() == 0  # a generator: nothing read before the first object is wanted
    names = [next(items).object["metadata"]["name"] for _ in range(2)]
    assert names == ["gpu-0", "gpu-1"] and pages_asked() == 1
    next(items)
    assert pages_asked() == 2
    assert len(list(items)) == 2 and pages_asked() == 3
