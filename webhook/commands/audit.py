"""`gpu-webhook audit`: what the rules would do to manifests or to a live cluster's workloads.

A thin door: sources -> webhook.audit.audit (the server's engine, as CREATE) -> a report.
Exit 1 when a Deny rule fails (or a Warn rule, with --fail-on warn), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from webhook.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    add_namespace_objects,
    add_rules,
    load_ruleset,
    namespaces_in,
    rule_paths,
    warn,
)

if TYPE_CHECKING:
    from webhook.audit.context import NamespaceContext
    from webhook.audit.sources import Item

# webhook.audit.formats.FORMATS, which imports the report writers: the parser needs only the names
FORMATS = ("table", "json", "yaml", "policyreport", "junit", "html")


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
    parser.add_argument(
        "-o", "--output", choices=FORMATS, help="report format (default: table on a terminal, else json)"
    )
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
    from webhook.audit import Tally, audit, read_manifests
    from webhook.audit.context import NamespaceContext
    from webhook.audit.formats import make_report
    from webhook.audit.sources import STDIN, InputProblem, SourceError

    if args.cluster == bool(args.paths):
        raise UsageError("give manifest PATHs or --cluster (one of the two)")
    output = args.output or ("table" if sys.stdout.isatty() else "json")
    if args.apply and output != "policyreport":
        raise UsageError("--apply writes PolicyReports: use it with --output policyreport")
    if args.page_size < 1:
        raise UsageError("--page-size must be at least 1")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    api = None
    if args.cluster or args.apply:
        from webhook.audit import cluster

        try:
            api = cluster.Api(cluster.connect(args.kubeconfig, args.context))
        except cluster.ClusterError as error:
            raise UsageError(str(error)) from None
    # --cluster: the cluster's GPUPolicy and GPUPolicyOverlay objects too, loaded with the files as the
    # server loads them, so the audit judges the workloads by the rules that admitted them
    objects = _cluster_policies(api) if args.cluster and api is not None else []
    ruleset = load_ruleset(rule_paths(args.rules, args.site), objects=objects)
    actions = {rule.name: rule.action for rule in ruleset.rules}

    report = make_report(output, sys.stdout, actions, details=not args.summary, fail_on=args.fail_on)
    # only the formats that print diffs have them rendered (--jobs workers render before sending)
    diffs = args.diff and (output in ("json", "yaml", "html") or (output == "table" and not args.summary))
    tally = Tally(live=args.cluster)

    def problem(message: str) -> None:  # reported at once and in the report; the audit goes on with the rest
        found = message if isinstance(message, InputProblem) else InputProblem(*_split(message, STDIN))
        tally.problems += 1
        report.problem(found)
        warn(found)

    with _progress() as progress:
        try:
            if args.cluster:
                items, context = _cluster_items(api, args, progress)
            else:
                # Namespace objects anywhere in the files count, wherever they sort; on stdin they
                # count from where they appear (kubectl, helm and kustomize output puts them first)
                namespaces = namespaces_in(args.namespace_objects or [], problem)
                namespaces.update(namespaces_in([p for p in args.paths if p != "-"], lambda _: None, scan=True))
                context = NamespaceContext(namespaces, args.namespace, problem=problem)
                items = read_manifests(args.paths, problems=problem, notes=warn)
                files = _parallel_files(args) if args.jobs > 1 else None
                if files is not None:
                    from webhook.audit.parallel import audit_files

                    # the JSON report takes its entries as the workers wrote them, and their counts per file
                    entries = output == "json"
                    for kind, value in audit_files(
                        files, args.jobs, ruleset, namespaces, args.namespace, diffs=diffs, entries=entries
                    ):
                        if kind == "result":
                            tally.add(value)
                            report.add(value)
                            progress.advance()
                        elif kind == "entry":
                            report.add_entry(value)  # type: ignore[attr-defined]
                            progress.advance()
                        elif kind == "tally":
                            tally.merge(value)
                        else:
                            (problem if kind == "problem" else warn)(value)
                    items = iter(())
            for result in audit(ruleset, items, context, diffs=diffs):
                tally.add(result)
                report.add(result)
                progress.advance()
        except SourceError as error:
            _flush(report)
            raise UsageError(str(error)) from None
        except _cluster_error() as error:
            _flush(report)
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


def _split(message: str, stdin: str) -> tuple[str, str]:
    """(origin, reason) of a problem told as plain text ("path: reason"; `-` named as everywhere else)."""
    origin, _, reason = message.partition(": ")
    return (stdin if origin == "-" else origin), reason or message


def _flush(report: Any) -> None:
    """Write what a report holds back (the JSON report writes in blocks) before a usage error ends the run."""
    flush = getattr(report, "flush", None)
    if flush is not None:
        flush()


def _parallel_files(args: argparse.Namespace) -> list[str] | None:
    """The files to share among --jobs workers, or None when this input must be read in order."""
    from webhook.audit.parallel import parallel_safe
    from webhook.audit.sources import manifest_files

    files = list(manifest_files(args.paths))
    if len(files) < 2 or not parallel_safe(files):
        return None  # one file, stdin, or PriorityClasses/DRA claims that count from where they appear
    return files


def _cluster_error() -> type[Exception]:
    from webhook.audit.cluster import ClusterError

    return ClusterError


def _cluster_policies(api: Any) -> list[Any]:
    """The policy objects of the cluster as loader documents (none where the CRDs are not installed)."""
    from webhook.audit import cluster

    try:
        return cluster.policy_documents(api)
    except cluster.ClusterError as error:
        raise UsageError(str(error)) from None


def _cluster_items(api: Any, args: argparse.Namespace, progress: _Progress) -> tuple[Iterator[Item], NamespaceContext]:
    """The cluster's workloads, and the context the server would judge them with (its own, listed once)."""
    from webhook.audit import cluster
    from webhook.audit.context import NamespaceContext

    def unavailable(message: str, status: int) -> None:
        # not served (404: an older cluster) is quiet, as for workload kinds; forbidden changes results
        (progress.note if status == 404 else warn)(message)

    context = cluster.read_context(api, args.namespace, limit=args.page_size, note=unavailable)
    items = cluster.read_workloads(
        api,
        namespace=args.namespace,
        include_owned=args.include_owned,
        limit=args.page_size,
        progress=progress.page,
        skipped=lambda kind: progress.note(f"{kind}: not served by this cluster, skipped"),
    )
    return items, NamespaceContext(cluster=context)


def _apply(api: Any, report: Any) -> None:
    from webhook.audit import cluster

    for policy_report in report.builder.reports():
        metadata = policy_report["metadata"]
        where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
        try:
            outcome = cluster.apply_report(api, policy_report)
        except cluster.ClusterError as error:
            raise UsageError(str(error)) from None
        print(f"{policy_report['kind']} {where}{metadata['name']} {outcome}", file=sys.stderr)


class _Progress:
    """A rich progress bar on stderr when it is a terminal; silent otherwise (CI logs, pipes)."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None
        self.kind = "objects"
        self.expected = 0

    def start(self) -> None:
        if not sys.stderr.isatty():
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("auditing objects", total=None)

    def page(self, kind: str, count: int, remaining: int | None) -> None:
        if self.bar is None:
            return
        if kind != self.kind:
            self.kind, self.expected = kind, 0
        # remainingItemCount makes the total known after the first page of each kind
        self.expected += count
        done = self.bar.tasks[0].completed
        total = done + self.expected + (remaining or 0) if remaining is not None else None
        self.bar.update(self.task, description=f"auditing {kind}s", total=total)

    def advance(self) -> None:
        if self.bar is not None:
            self.expected -= 1
            self.bar.advance(self.task)

    def note(self, message: str) -> None:
        if self.bar is not None:
            self.bar.console.print(message, style="dim")

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@contextlib.contextmanager
def _progress() -> Iterator[_Progress]:
    progress = _Progress()
    progress.start()
    try:
        yield progress
    finally:
        progress.stop()
