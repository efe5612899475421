"""Fixtures every test area shares: a throw-away CA, the compiled pack, a copy of the rules, a live HTTPS server."""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
from collections.abc import AsyncIterator, Generator, Iterable, Iterator
from pathlib import Path

import aiohttp
import pytest

import webhook.authoring.lint
import webhook.authoring.suite
import webhook.commands.common
import webhook.policies.files
from tests.support import RULES, LiveServer, client_ssl, start_server
from tests.support.require_real import RealParts
from webhook.certs import generate_bundle, write_bundle
from webhook.engine import LoadResult, RuleSet, load_rules, rule_files
from webhook.kubeyaml import Document


@pytest.fixture(scope="session")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    write_bundle(generate_bundle(["localhost"], ["127.0.0.1"]), directory)
    return directory


# Loading is a pure function of the rule files' paths and bytes, and a RuleSet is immutable, so the
# doors' in-process runs (`main(["audit", ...])`, `gpu-webhook test`, lint, a test server's first
# load) share one load per distinct set of files: parsing the YAML with positions and compiling
# the CEL of the pack costs ~0.2 s, and the tests would load it ~100 times. A test that edits a
# rule file changes the key and loads afresh; the loader's own tests (tests/engine) call
# load_rules directly, uncached.
_LOADED: dict[tuple[object, ...], LoadResult] = {}


def _files_key(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str]) -> tuple[object, ...] | None:
    named = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    try:
        files = rule_files(p for p in named if os.path.exists(p))
        contents = tuple((file, hashlib.sha256(Path(file).read_bytes()).digest()) for file in files)
    except OSError:
        return None  # let the loader say what is wrong
    return tuple(map(os.fspath, named)), contents


def load_rules_once(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    objects: Iterable[Document] = (),
    absent: Iterable[str] = (),
) -> LoadResult:
    objects, absent = list(objects), list(absent)
    key = _files_key(paths)
    if key is None or objects or absent:  # policy objects from a cluster: loaded each time, as the server does
        return load_rules(paths, objects, absent)
    if key not in _LOADED:
        _LOADED[key] = load_rules(paths)
    return _LOADED[key]


@pytest.fixture(scope="session")
def pack() -> RuleSet:
    """The shipped rule pack, loaded and compiled once per session (read-only: a RuleSet is frozen)."""
    return load_rules_once(RULES).require()


@pytest.fixture(scope="session", autouse=True)
def doors_load_each_pack_once() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for door in (
            webhook.commands.common,
            webhook.authoring.suite,
            webhook.authoring.lint,
            webhook.policies.files,
        ):
            patch.setattr(door, "load_rules", load_rules_once)
        yield


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """A private copy of the default rule pack that a test may edit or break."""
    target = tmp_path / "rules"
    shutil.copytree(RULES, target, ignore=shutil.ignore_patterns("tests"))
    return target


@pytest.fixture
async def live_server(cert_dir: Path, rules_dir: Path) -> AsyncIterator[LiveServer]:
    server = await start_server(cert_dir, rules_dir)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl(cert_dir))) as session:
        yield LiveServer(server, session)
    await server.stop()


# The inner loop is `pytest -m "not slow"` (seconds); plain `pytest`, .ci/run and the README run
# everything. Slow, by what makes it slow: a node id (or its file) -> the reason. A test marked
# `attack` is slow too. Keep this table, not marks scattered in files, the one place to look.
SLOW: dict[str, str] = {
    # subprocesses: a fresh interpreter importing the package, or a server process
    "tests/authoring/test_doc_commands.py": "runs every command block of the docs as a subprocess",
    "tests/authoring/test_user_errors.py": "runs the CLI as a subprocess, as a user would",
    "tests/authoring/test_suites.py::test_console_script": "subprocess",
    "tests/authoring/test_cli.py::test_version": "subprocess",
    "tests/engine/test_null_results.py": "a fresh interpreter evaluating thousands of null results",
    "tests/audit/test_cli_loading.py::test_audit_does_not_import_the_server_or_the_exporter": "subprocess",
    "tests/audit/test_context_and_errors.py::test_concatenated_examples_are_fourteen_objects": "subprocess",
    "tests/export/test_cli.py": "runs `gpu-webhook export` as a subprocess",
    "tests/deploy/test_installed_wheel.py": "builds a wheel and installs it into a new virtualenv",
    "tests/kube/test_cluster_context.py::test_serve_without_namespaces_says_which_rules_cannot_act": "subprocess",
    "tests/server/test_namespace_context.py::test_serve_watches_namespaces_when_given_a_kubeconfig": "subprocess",
    "tests/server/test_reload_and_shutdown.py::test_sigterm_finishes_in_flight_requests": "server process",
    "tests/server/test_workers.py": "server processes with --workers 2",
    "tests/audit/test_jobs.py::test_jobs_two_writes_the_same_bytes_as_jobs_one": "forks --jobs 2 worker processes",
    "tests/ci/test_require_real.py": "runs pytest as a subprocess, as CI does",
    # a directory: every file in it
    "tests/e2e": "a real etcd + kube-apiserver and `gpu-webhook serve` as subprocesses (tests/support/envtest.py)",
    "tests/cluster": "a whole cluster: apiserver, controllers, scheduler, hollow nodes, Kueue (tests/support/cluster.py)",
    # kubectl
    "tests/deploy/test_render.py::test_builtin_renderer_matches_kubectl_kustomize": "kubectl",
    "tests/deploy/test_render.py::test_components_render_the_same_through_kubectl": "kubectl",
    # Chromium
    "tests/audit/test_html_browser.py": "renders the report in headless Chromium",
    # load, soak and hostile clients against a live TLS server; property tests with many examples
    "tests/reliability/test_tenant_proof.py": "a server under attack: pauses, floods, large bodies",
    "tests/reliability/test_faults.py": "reloads, certificate swaps and SIGTERM under load",
    "tests/reliability/test_fuzz.py": "hostile bodies and clients, many examples",
    "tests/reliability/test_properties.py": "property tests through every door (hypothesis)",
    "tests/reliability/test_regressions.py": "misbehaving TLS connections, each against its own server",
    "tests/reliability/test_tls_access.py": "TLS handshakes of every protocol version and client certificate",
    "tests/reliability/test_tenant_boundary.py": "a live server per case",
    "tests/deploy/test_certificate_rotation.py": "certificate swaps under load",
    "tests/server/test_bad_input.py": "a live server per malformed request (25 cases), slow senders",
    "tests/export/test_equivalence.py::test_generated_workloads_get_the_same_decisions": "hypothesis, thousands of evaluations",
    "tests/audit/test_report_bytes.py": "every report format over a mixed corpus, against recorded bytes; --jobs 2 forks",
    "tests/audit/test_yaml_compat.py::test_fast_and_reference_loaders_agree": "hypothesis, 150 generated documents",
    "tests/engine/test_cel_helpers.py::test_evaluating_the_pack_does_not_grow_memory": "a memory soak",
    "tests/audit/test_yaml_compat.py::test_rapidyaml_memory_stays_flat": "a memory soak (thousands of parses)",
    "tests/audit/test_yaml_block.py::test_the_same_bytes_as_pyyaml": "hypothesis, generated documents",
    "tests/audit/test_yaml_block_fast.py": "hypothesis, generated and edited documents",
    "tests/audit/test_linediff.py::test_same_bytes_as_difflib": "hypothesis, generated line lists against difflib",
    "tests/audit/test_linediff.py::test_same_bytes_as_difflib_around_autojunk": "hypothesis, 200-line lists against difflib",
    "tests/audit/test_outcomes_fold.py::test_outcomes_are_the_previous_fold": "hypothesis, 400 random decisions",
    "tests/engine/test_activation_variables_differential.py": "every suite case of the pack, evaluated twice",
    # a live TLS server per test (its own certificates, rules copy, event loop and reload thread)
    "tests/server/test_admission_https.py": "a live server per test",
    "tests/server/test_record_reviews.py": "a live server per test; one runs `serve --help` as a subprocess",
    "tests/server/test_audit_mode.py": "a live server per test",
    "tests/server/test_device_access_exceptions.py": "a live server with the whole pack per test",
    "tests/server/test_long_warnings.py": "a live server per test",
    "tests/server/test_reload_and_shutdown.py": "a live server per test, waiting for reloads",
    "tests/server/test_namespace_context.py": "a live server and a stand-in API server per test",
    "tests/server/test_policy_objects.py::test_policy_objects_need_a_cluster": "subprocess",
    "tests/server/test_policy_objects.py::test_a_cluster_without_the_crds_keeps_a_replica_that_uses_them_unready": (
        "subprocess"
    ),
    "tests/server/test_policy_check_bounds.py": "a live server per test, forking check processes that lint the pack",
    "tests/kube/test_cluster_context.py": "a live server and a stand-in API server per test",
    "tests/kube/test_namespace_cache.py": "a stand-in API server (sockets, a watch thread) per test",
    "tests/audit/test_cluster.py": "a stand-in API server per test",
    "tests/deploy/test_install_safety.py::test_the_rendered_enforce_install_fails_closed": "a live server",
    "tests/engine/test_ratcheting.py::test_kubectl_debug_reaches_the_rules_through_the_server": "a live server",
    # the whole pack, loaded (or exported, or run through its suites) once per case
    "tests/authoring/test_suites.py::test_junit_output": "runs every suite of the pack",
    "tests/authoring/test_suites.py::test_a_changed_rule_fails_with_a_diff": "runs every suite of the pack",
    "tests/authoring/test_suites.py::test_default_pack_suites_pass": "runs every suite of the pack",
    "tests/export/test_schema.py": "exports the pack once per Kubernetes release",
    "tests/export/test_equivalence.py": "exports the pack and runs it beside the engine",
    "tests/export/test_mixed.py": "exports the pack",
    "tests/export/test_exceptions.py::test_no_exported_rule_of_the_pack_is_exceptable": "exports the pack, twice",
    "tests/export/test_translation.py::test_exported_policies_stay_within_the_apiservers_budgets": "exports the pack",
    "tests/deploy/test_manifests_native.py::test_each_rule_runs_in_exactly_one_place": "exports the pack, twice",
    # like test_equivalence: exports the pack twice, every suite case (x every workload kind, x kubectl
    # debug) beside the engine: 20,000 comparisons, every mutation applied twice, hypothesis
    "tests/export/test_claims.py": "exports the pack and runs it beside the engine",
    "tests/deploy/test_install_safety.py": "renders every overlay with a fresh CA; a live server",
    "tests/deploy/test_render.py": "renders every overlay, validated against the Kubernetes OpenAPI schemas",
    "tests/authoring/test_schema.py::test_schemas_are_valid_and_accept_the_pack": "validates every rule file",
    "tests/deploy/test_certs_names.py::test_the_server_is_reached_by_each_name_and_address": "a live server",
    "tests/deploy/test_runtime_layout.py": "builds a wheel, runs `serve` from a --target install as uid 65532",
    "tests/deploy/test_version.py::test_the_version_is_gits": "subprocess (setuptools-scm)",
    "tests/deploy/test_alerts.py::test_each_alert_is_proven_to_fire_and_to_stay_quiet": "promtool runs, 3 per alert",
    "tests/deploy/test_alerts.py::test_every_metric_of_the_alerts_and_the_dashboard_is_served": "a live server",
    "tests/helm": "Helm v4 (libhelm) renders of the chart beside `manifests` renders; a real apiserver",
    "tests/deploy/test_version.py::test_a_tree_without_git_builds_as_an_unknown_version": "subprocess (setup.py)",
}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The inner loop (`-m "not slow"`) does not even import a file (or directory) that is slow as a whole.

    Collection imports every test module before `-m` deselects anything; the slow files pull in
    hypothesis strategies, the Kubernetes client and server fixtures (~1 s of the inner loop).
    """
    if config.option.markexpr != "not slow" or not (collection_path.suffix == ".py" or collection_path.is_dir()):
        return None
    relative = collection_path.relative_to(config.rootpath).as_posix()
    return True if relative in SLOW else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        node = item.nodeid.split("[")[0]
        file = node.split("::")[0]
        if node in SLOW or file in SLOW or file.rpartition("/")[0] in SLOW or item.get_closest_marker("attack"):
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Everything imported and collected so far lives for the whole session: moved out of the
    # collector's reach, the full collections a test run triggers (and those a server start or
    # a memory test asks for) walk only what the tests build, not ~1 M objects of the imports.
    gc.freeze()


# CI's guard against a green run with the real parts skipped (tests/support/require_real.py).
_REAL_PARTS = pytest.StashKey[RealParts]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_REAL_PARTS] = RealParts(config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.config.stash[_REAL_PARTS].record(item, report)
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.stash[_REAL_PARTS].problems() and session.exitstatus in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    real = config.stash[_REAL_PARTS]
    for line in real.summary():
        terminalreporter.write_line(line)
    for problem in real.problems():
        terminalreporter.write_line(problem, red=True)
