"""`gpu-webhook audit`: what the rules would do to manifests or to a live cluster's workloads.

A thin verb: flags -> webhook.audit.run.Runner (the server's engine, as CREATE) -> the report
of webhook.audit.formats.AUDIT that --output names. Exit 1 when a Deny rule fails (or a Warn rule,
with --fail-on warn), 2 on usage errors and inputs that could not be read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.audit.formats import AUDIT
from webhook.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    add_namespace_objects,
    add_output,
    add_rules,
    load_ruleset,
    rule_paths,
    warn,
)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "audit",
        help="report what the rules would deny, warn about or patch",
        description="Evaluate manifests (files, directories, - for stdin) or a live cluster's workloads "
        "as CREATE requests and report what would be denied, warned about, audited or patched. "
        "Namespace objects in the input (or --namespace-objects) give rules their namespaceObject; "
        "rules that need one and lack it are reported as not evaluated.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="YAML/JSON files or directories; - reads stdin")
    add_rules(parser)
    add_namespace_objects(parser)
    cluster = parser.add_argument_group("live cluster")
    cluster.add_argument("--cluster", action="store_true", help="audit the workloads of a live cluster")
    cluster.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, in-cluster)")
    cluster.add_argument("--context", metavar="NAME", help="kubeconfig context")
    scope = cluster.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        metavar="NAME",
        help="manifests: the namespace of objects that name none (as kubectl apply -n; default: default); "
        "--cluster: audit only this namespace",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace (the default)")
    cluster.add_argument(
        "--include-owned", action="store_true", help="also audit objects made by an audited controller (pods of a Job)"
    )
    cluster.add_argument("--page-size", type=int, default=500, metavar="N", help="objects per list request")
    add_output(parser, AUDIT, help="report format (default: table on a terminal, else json)")
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="manifest files: audit with N processes (the same report, in the same order, as with 1)",
    )
    parser.add_argument(
        "--no-diff",
        dest="diff",
        action="store_false",
        help="leave out the diff of each patched object (the patch stays): faster on large inputs",
    )
    parser.add_argument("--summary", action="store_true", help="table: only the summaries, no per-object details")
    parser.add_argument("--apply", action="store_true", help="with -o policyreport: write the reports to the cluster")
    parser.add_argument(
        "--fail-on",
        choices=("deny", "warn", "never"),
        default="deny",
        help="what makes the exit code 1: objects the apiserver would refuse (deny), those or warnings (warn), "
        "nothing (never: a scheduled report)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from webhook.audit.formats import ReportOptions, make_report
    from webhook.audit.progress import progress_bar
    from webhook.audit.run import Options, Runner, Sources
    from webhook.audit.sources import SourceError

    if args.cluster == bool(args.paths):
        raise UsageError("give manifest PATHs or --cluster (one of the two)")
    output = args.output or ("table" if sys.stdout.isatty() else "json")
    if args.apply and not AUDIT[output].writes_cluster:
        raise UsageError("--apply writes PolicyReports: use it with --output policyreport")
    if args.page_size < 1:
        raise UsageError("--page-size must be at least 1")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    api = _connect(args) if args.cluster or args.apply else None
    # --cluster: the cluster's GPUPolicy and GPUPolicyOverlay objects too, loaded with the files as the
    # server loads them, so the audit judges the workloads by the rules that admitted them
    objects = _cluster_policies(api) if args.cluster and api is not None else []
    ruleset = load_ruleset(rule_paths(args.rules, args.site), objects=objects)
    actions = {rule.name: rule.action for rule in ruleset.rules}
    report = make_report(output, sys.stdout, ReportOptions(actions, details=not args.summary, fail_on=args.fail_on))
    options = Options(args.namespace, args.jobs, args.diff, args.include_owned, args.page_size)
    sources = Sources(args.paths, args.namespace_objects, api if args.cluster else None)

    with progress_bar() as progress:
        try:
            tally = Runner(ruleset, report, options, progress, warn).run(sources)
        except SourceError as error:
            raise UsageError(str(error)) from None
        except _cluster_error() as error:
            raise UsageError(str(error)) from None
    report.finish(tally)
    sys.stdout.flush()

    if args.apply:
        _apply(api, report)
    if tally.problems:
        count = tally.problems
        warn(
            f"{count} input{'s' if count != 1 else ''} could not be read: the report lists {'them' if count != 1 else 'it'}"
        )
        return EXIT_USAGE
    return EXIT_FAILED if tally.failed(args.fail_on) else EXIT_OK


def _connect(args: argparse.Namespace) -> Any:
    from webhook.audit import cluster

    try:
        return cluster.Api(cluster.connect(args.kubeconfig, args.context))
    except cluster.ClusterError as error:
        raise UsageError(str(error)) from None


def _cluster_error() -> type[Exception]:
    """ClusterError, looked up when an error is raised: a file audit never imports the kubernetes client."""
    from webhook.audit.cluster import ClusterError

    return ClusterError


def _cluster_policies(api: Any) -> list[Any]:
    """The policy objects of the cluster as loader documents (none where the CRDs are not installed)."""
    from webhook.audit import cluster

    try:
        return cluster.policy_documents(api)
    except cluster.ClusterError as error:
        raise UsageError(str(error)) from None


def _apply(api: Any, report: Any) -> None:
    """--apply: the report's PolicyReports written to the cluster, a line on stderr for each."""
    from webhook.audit.run import apply_reports

    try:
        for line in apply_reports(api, report):
            print(line, file=sys.stderr)
    except _cluster_error() as error:
        raise UsageError(str(error)) from None
