"""One audit run, as gator's Runner does it: sources and options in, the report fed, the tally out.

`Runner.run(sources)` reads the objects (manifest files in order, or shared among `--jobs`
worker processes and merged back in input order, or a live cluster's workloads), gives each
the namespace context the server would give it, evaluates it with `audit()` and hands every
result to the tally and the report. `apply_reports` writes a PolicyReport report's documents
to the cluster (`--apply`). The `audit` command only turns flags into these and prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from webhook.engine import RuleSet

from .context import NamespaceContext, namespaces_in
from .results import Tally, audit
from .sources import STDIN, InputProblem, Item, SourceError, manifest_files, read_manifests

if TYPE_CHECKING:
    from .cluster import Api
    from .formats import Report


@dataclass(frozen=True, slots=True)
class Sources:
    """What to audit: manifest PATHs (`-` for stdin) with their Namespace objects, or a live cluster."""

    paths: Sequence[str] = ()
    namespace_objects: Sequence[str] = ()  # files of Namespace objects: context, never audited
    cluster: Api | None = None  # audit this cluster's workloads instead of files


@dataclass(frozen=True, slots=True)
class Options:
    namespace: str | None = None  # files: the namespace of objects that name none; cluster: the only one read
    jobs: int = 1  # files: worker processes (the same report, in the same order, as with 1)
    diffs: bool = True  # render each patched object's diff, when the report shows diffs
    include_owned: bool = False  # cluster: also objects made by an audited controller
    page_size: int = 500  # cluster: objects per list request


class Progress(Protocol):
    """What a run tells while it goes (a progress bar on a terminal; nothing by default)."""

    def page(self, kind: str, count: int, remaining: int | None) -> None: ...

    def advance(self) -> None: ...

    def note(self, message: str) -> None: ...


class _Silent:
    def page(self, kind: str, count: int, remaining: int | None) -> None:
        pass

    def advance(self) -> None:
        pass

    def note(self, message: str) -> None:
        pass


def _quiet(message: str) -> None:
    pass


class Runner:
    """Audits sources with one rule set into one report; `warn` hears what the user must see at once."""

    def __init__(
        self,
        ruleset: RuleSet,
        report: Report,
        options: Options | None = None,
        progress: Progress | None = None,
        warn: Callable[[str], None] = _quiet,
    ) -> None:
        self.ruleset = ruleset
        self.report = report
        self.options = options or Options()
        self.progress: Progress = progress or _Silent()
        self.warn = warn
        # only a report that prints diffs has them rendered (--jobs workers render before sending)
        self.diffs = self.options.diffs and report.shows_diffs

    def run(self, sources: Sources) -> Tally:
        """The tally of every object of the sources, each result given to the report (the caller finishes it
        with the tally). SourceError or ClusterError when an input cannot be read at all (the report has
        written what it held)."""
        tally = Tally(live=sources.cluster is not None)
        try:
            if sources.cluster is not None:
                context = self._cluster_context(sources.cluster)  # listed once, before the first workload
                self._feed(tally, self._cluster_items(sources.cluster), context)
            else:
                self._files(tally, sources)
        except SourceError:
            self._flush()
            raise
        except _cluster_error():  # looked up only once something is raised: file audits never import the client
            self._flush()
            raise
        return tally

    def _flush(self) -> None:
        """Write what the report holds back (the JSON report writes in blocks) before an error ends the run."""
        flush = getattr(self.report, "flush", None)
        if flush is not None:
            flush()

    def _problem(self, tally: Tally) -> Callable[[str], None]:
        def problem(message: str) -> None:  # reported at once and in the report; the audit goes on with the rest
            found = message if isinstance(message, InputProblem) else InputProblem(*_split(message))
            tally.problems += 1
            self.report.problem(found)
            self.warn(found)

        return problem

    def _feed(self, tally: Tally, items: Iterable[Item], context: NamespaceContext) -> None:
        for result in audit(self.ruleset, items, context, diffs=self.diffs):
            tally.add(result)
            self.report.add(result)
            self.progress.advance()

    def _files(self, tally: Tally, sources: Sources) -> None:
        problem = self._problem(tally)
        # Namespace objects anywhere in the files count, wherever they sort; on stdin they
        # count from where they appear (kubectl, helm and kustomize output puts them first)
        namespaces = namespaces_in(sources.namespace_objects, problem)
        namespaces.update(namespaces_in([p for p in sources.paths if p != "-"], _quiet, scan=True))
        context = NamespaceContext(namespaces, self.options.namespace, problem=problem)
        files = parallel_files(sources.paths) if self.options.jobs > 1 else None
        if files is None:
            self._feed(tally, read_manifests(sources.paths, problems=problem, notes=self.warn), context)
        else:
            self._parallel(tally, files, namespaces, problem)

    def _parallel(
        self, tally: Tally, files: list[str], namespaces: dict[str, dict[str, Any]], problem: Callable[[str], None]
    ) -> None:
        """The workers' events merged in file order, into the tally and the report as `--jobs 1` does."""
        from .parallel import audit_files

        # a report that takes entries gets them as the workers wrote them, and their counts per file
        entries = self.report.takes_entries
        events = audit_files(
            files,
            self.options.jobs,
            self.ruleset,
            namespaces,
            self.options.namespace,
            diffs=self.diffs,
            entries=entries,
        )
        for kind, value in events:
            if kind == "result":
                tally.add(value)
                self.report.add(value)
                self.progress.advance()
            elif kind == "entry":
                self.report.add_entry(value)  # type: ignore[attr-defined]
                self.progress.advance()
            elif kind == "tally":
                tally.merge(value)
            else:
                (problem if kind == "problem" else self.warn)(value)

    def _cluster_context(self, api: Api) -> NamespaceContext:
        """The context the server would judge the cluster's workloads with (its own, listed once)."""
        from . import cluster

        def unavailable(message: str, status: int) -> None:
            # not served (404: an older cluster) is quiet, as for workload kinds; forbidden changes results
            (self.progress.note if status == 404 else self.warn)(message)

        caches = cluster.read_context(api, self.options.namespace, limit=self.options.page_size, note=unavailable)
        return NamespaceContext(cluster=caches)

    def _cluster_items(self, api: Api) -> Iterator[Item]:
        from . import cluster

        return cluster.read_workloads(
            api,
            namespace=self.options.namespace,
            include_owned=self.options.include_owned,
            limit=self.options.page_size,
            progress=self.progress.page,
            skipped=lambda kind: self.progress.note(f"{kind}: not served by this cluster, skipped"),
        )


def _cluster_error() -> type[Exception]:
    from .cluster import ClusterError

    return ClusterError


def apply_reports(api: Api, report: Any) -> Iterator[str]:
    """Write a PolicyReport report's documents to the cluster, one line each as it is written
    (`PolicyReport team-a/gpu-webhook-audit created`); ClusterError when one cannot be."""
    from . import cluster

    for policy_report in report.reports():
        metadata = policy_report["metadata"]
        where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
        outcome = cluster.apply_report(api, policy_report)
        yield f"{policy_report['kind']} {where}{metadata['name']} {outcome}"


def _split(message: str) -> tuple[str, str]:
    """(origin, reason) of a problem told as plain text ("path: reason"; `-` named as everywhere else)."""
    origin, _, reason = message.partition(": ")
    return (STDIN if origin == "-" else origin), reason or message


def parallel_files(paths: Sequence[str]) -> list[str] | None:
    """The files to share among --jobs workers, or None when this input must be read in order."""
    from .parallel import parallel_safe

    files = list(manifest_files(paths))
    if len(files) < 2 or not parallel_safe(files):
        return None  # one file, stdin, or PriorityClasses/DRA claims that count from where they appear
    return files
