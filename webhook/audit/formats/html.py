"""One self-contained HTML page: summary cards, SVG bar charts by rule and by namespace, a
sortable table of findings, each patch as a diff (collapsed), the rules not evaluated for want of
namespace context (folded: each rule once, with its count, the reason and the fix) and the inputs
that could not be read. No network: styles, charts and the sort script are all inline.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from html import escape
from typing import TextIO

from webhook.engine import Result

from ..results import ObjectResult, Tally, text
from ..sources import InputProblem
from . import ReportOptions

FAIL, ERROR, WARN, AUDIT, PASS, SKIP = Result.FAIL, Result.ERROR, Result.WARN, Result.AUDIT, Result.PASS, Result.SKIP

# A cap on table rows keeps the page usable in a browser; the charts still count everything.
MAX_ROWS = 20_000
MAX_PATCHES = 1_000  # patches shown as diffs: each may be a few KiB
_COLOURS = {FAIL: "#d64545", WARN: "#e8a33d", AUDIT: "#5b8def", ERROR: "#8e6bbf", SKIP: "#9aa0aa"}
_LABELS: dict[str, str] = {FAIL: "Deny", WARN: "Warn", AUDIT: "Audit", ERROR: "Error", SKIP: "Not evaluated"}
# what the charts count: findings (rules not evaluated are folded in their own section, not charted)
_SERIES = (FAIL, ERROR, WARN, AUDIT)

_STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem;color:#1f2430;background:#f6f7f9}
h1{margin:0 0 .25rem}h2{margin:1.5rem 0 .5rem;font-size:1.1rem}.sub{color:#667}
.cards{display:flex;gap:1rem;flex-wrap:wrap;margin:1rem 0}
.card{background:#fff;border-radius:8px;padding:.75rem 1.25rem;box-shadow:0 1px 3px #0002;min-width:8rem}
.card b{display:block;font-size:1.6rem}.card.fail b{color:#d64545}.card.warn b{color:#e8a33d}
.charts{display:flex;gap:2rem;flex-wrap:wrap}.chart{background:#fff;border-radius:8px;padding:1rem;box-shadow:0 1px 3px #0002}
.legend span{display:inline-block;margin-right:1rem;font-size:.85rem}
.legend i{display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem;border-radius:2px;vertical-align:-1px}
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 3px #0002;font-size:.9rem}
th,td{padding:.4rem .6rem;border-bottom:1px solid #e4e6ea;text-align:left;vertical-align:top}
th{background:#eef0f4;cursor:pointer;user-select:none;white-space:nowrap}th:after{content:' \\2195';color:#99a}
td.n{text-align:right}td.k{white-space:nowrap}.r-fail{color:#d64545;font-weight:600}.r-warn{color:#c07d12;font-weight:600}
.r-audit{color:#3a6fd8}.r-error{color:#8e6bbf}.r-skip{color:#667}
details{background:#fff;border-radius:6px;box-shadow:0 1px 3px #0002;margin:.3rem 0;padding:.4rem .8rem}
summary{cursor:pointer}pre.diff{font-size:.85rem;overflow-x:auto;margin:.5rem 0 0}
pre.diff .add{background:#e6ffec;color:#116329;display:block}pre.diff .del{background:#ffebe9;color:#82071e;display:block}
pre.diff .hunk{color:#667;display:block}.fix{background:#fff;border-left:4px solid #9aa0aa;padding:.5rem .8rem}
"""

# Sort on header click; numeric when both cells are numbers. Few lines on purpose: no library.
_SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function(th, col){
  th.addEventListener('click', function(){
    var body = th.closest('table').tBodies[0], rows = Array.from(body.rows);
    var dir = th.dataset.dir === 'asc' ? -1 : 1; th.dataset.dir = dir === 1 ? 'asc' : 'desc';
    rows.sort(function(a, b){
      var x = a.cells[col].textContent, y = b.cells[col].textContent, nx = parseFloat(x), ny = parseFloat(y);
      return dir * (!isNaN(nx) && !isNaN(ny) ? nx - ny : x.localeCompare(y));
    });
    rows.forEach(function(r){ body.appendChild(r); });
  });
});
"""


class HtmlReport:
    shows_diffs, takes_entries = True, False

    def __init__(self, out: TextIO, options: ReportOptions) -> None:
        self.out = out
        self.rows: list[tuple[str, str, str, str, str, str, int, str]] = []
        self.dropped = 0
        self.patches: list[tuple[str, str, str]] = []  # (object and origin, rules that patched, diff or operations)
        self.patches_dropped = 0
        self.problems: list[InputProblem] = []

    def problem(self, problem: InputProblem) -> None:
        self.problems.append(problem)

    def add(self, result: ObjectResult) -> None:
        ref = result.ref
        if result.patch:
            if len(self.patches) < MAX_PATCHES:
                rules = ", ".join(o.rule for o in result.outcomes if o.patched)
                shown = result.diff() or _operations(result.patch)  # the operations with --no-diff
                self.patches.append((f"{ref} ({result.origin})", rules, shown))
            else:
                self.patches_dropped += 1
        for outcome in result.findings:
            if len(self.rows) >= MAX_ROWS:
                self.dropped += 1
                continue
            self.rows.append(
                (
                    outcome.result,
                    outcome.rule,
                    ref.namespace or "(cluster)",
                    ref.kind,
                    ref.name,
                    result.origin,
                    result.gpus,
                    text(outcome),
                )
            )

    def finish(self, tally: Tally) -> None:
        by = tally.objects_by_worst
        rule_bars = [(name, [c.results[s] for s in _SERIES]) for name, c in sorted(tally.rules.items())]
        namespace_bars = [(name, [c[s] for s in _SERIES]) for name, c in sorted(tally.namespaces.items())]
        # objects are counted once, by their worst result (an object denied and warned is denied); the
        # findings cards count what the Findings table lists: one row per rule and object
        findings = Counter[str]()
        for count in tally.rules.values():
            findings.update({result: count.results[result] for result in (WARN, AUDIT)})
        cards = [
            ("", "Objects audited", tally.objects),
            ("fail", "Denied", by[FAIL]),
            ("fail", "Errors", by[ERROR]),
            ("warn", "Warned (no worse result)", by[WARN]),
            ("warn", "Warning findings", findings[WARN]),
            ("", "Audited (no worse result)", by[AUDIT]),
            ("", "Audit findings", findings[AUDIT]),
            ("", "Would be patched", tally.patched_objects),
            ("", "Passed", by[PASS]),
            ("", "With rules not evaluated (no namespace context)", tally.skipped_objects),
            ("fail", "Inputs not read", tally.problems),
            ("", "GPUs affected", f"{tally.gpus_affected} / {tally.gpus}"),
        ]
        parts = [
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
            "<title>gpu-webhook audit report</title><style>",
            _STYLE,
            "</style></head><body>",
            "<h1>gpu-webhook audit report</h1>",
            f'<p class="sub">{tally.objects} objects evaluated as CREATE against the rule set.</p>',
            '<div class="cards">',
            *(
                f'<div class="card {cls}"><b>{escape(str(value))}</b>{escape(label)}</div>'
                for cls, label, value in cards
            ),
            '</div><div class="legend">',
            *(f'<span><i style="background:{_COLOURS[s]}"></i>{_LABELS[s]}</span>' for s in _SERIES),
            '</div><div class="charts">',
            f'<div class="chart"><h2>Findings by rule</h2>{_bars(rule_bars)}</div>',
            f'<div class="chart"><h2>Objects with findings by namespace</h2>{_bars(namespace_bars)}</div>',
            "</div><h2>Findings</h2>",
        ]
        if self.dropped:
            parts.append(f'<p class="sub">Showing the first {MAX_ROWS} findings; {self.dropped} more not shown.</p>')
        parts.append(
            '<table class="sortable"><thead><tr><th>Result</th><th>Rule</th><th>Namespace</th><th>Kind</th>'
            "<th>Name</th><th>Source</th><th>GPUs</th><th>Message</th></tr></thead><tbody>"
        )
        for result, rule, namespace, kind, name, origin, gpus, message in self.rows:
            parts.append(
                f'<tr><td class="r-{result}">{_LABELS.get(result, result.title())}</td><td class="k">{escape(rule)}</td><td>{escape(namespace)}</td>'
                f'<td>{escape(kind)}</td><td>{escape(name)}</td><td>{escape(origin)}</td><td class="n">{gpus}</td>'
                f"<td>{escape(message)}</td></tr>"
            )
        if not self.rows:
            parts.append('<tr><td colspan="8">No findings.</td></tr>')
        parts.append("</tbody></table>")
        parts += self._patches(tally) + _not_evaluated(tally) + self._problems()
        parts += ["<script>", _SCRIPT, "</script></body></html>\n"]
        self.out.write("".join(parts))

    def _patches(self, tally: Tally) -> list[str]:
        """Each patch as the diff of the object's YAML, collapsed under a line naming the object."""
        parts = [f'<h2 id="patches">Patches ({tally.patched_objects} objects would be patched)</h2>']
        if self.patches_dropped:
            parts.append(f'<p class="sub">Showing the first {MAX_PATCHES}; {self.patches_dropped} more not shown.</p>')
        for name, rules, shown in self.patches:
            parts.append(
                f"<details><summary>{escape(name)}: {escape(rules)}</summary>"
                f'<pre class="diff">{_diff_lines(shown)}</pre></details>'
            )
        if not self.patches:
            parts.append('<p class="sub">No patches.</p>')
        return parts

    def _problems(self) -> list[str]:
        if not self.problems:
            return []
        parts = [
            f'<h2 id="problems">Inputs not read ({len(self.problems)})</h2>',
            '<table class="sortable"><thead><tr><th>Input</th><th>Reason</th></tr></thead><tbody>',
        ]
        parts += (f"<tr><td>{escape(p.origin)}</td><td>{escape(p.reason)}</td></tr>" for p in self.problems)
        parts.append("</tbody></table>")
        return parts


def _not_evaluated(tally: Tally) -> list[str]:
    """The folded form: each rule once, with the objects it could not judge; the reason and fix once."""
    folded = tally.not_evaluated()
    if folded is None:
        return []
    return [
        f'<h2 id="not-evaluated">Not evaluated ({len(folded.rules)} rules, {tally.skipped_objects} objects)</h2>',
        f'<p class="fix">{escape(folded.reason)}<br>Fix: {escape(folded.fix)}</p>',
        '<table class="sortable"><thead><tr><th>Rule</th><th>Objects</th></tr></thead><tbody>',
        *(f'<tr><td class="k">{escape(rule)}</td><td class="n">{objects}</td></tr>' for rule, objects in folded.rules),
        "</tbody></table>",
    ]


def _operations(patch: list[dict[str, object]]) -> str:
    import orjson

    return orjson.dumps(patch, option=orjson.OPT_INDENT_2, default=str).decode()


def _diff_lines(diff: str) -> str:
    """A unified diff with its added, removed and hunk lines marked for colour."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("@@", "+++ ", "--- ")):
            kind = "hunk"
        else:
            kind = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
        out.append(f'<span class="{kind}">{escape(line)}</span>' if kind else escape(line) + "\n")
    return "".join(out)


def _bars(series: Sequence[tuple[str, Sequence[int]]], width: int = 560) -> str:
    """Horizontal stacked bars, one per label, scaled to the largest total; labels on the left."""
    shown = [(label, counts) for label, counts in series if sum(counts)]
    if not shown:
        return '<p class="sub">No findings.</p>'
    label_width, row, bar_area = 220, 26, width - 220 - 50
    largest = max(sum(counts) for _, counts in shown)
    height = row * len(shown) + 4
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for index, (label, counts) in enumerate(shown):
        y = index * row + 2
        text = label if len(label) <= 30 else label[:29] + "…"
        out.append(
            f'<text x="{label_width - 8}" y="{y + 16}" text-anchor="end" font-size="12">'
            f"<title>{escape(label)}</title>{escape(text)}</text>"
        )
        x = float(label_width)
        for name, count in zip(_SERIES, counts, strict=True):
            if count:
                w = max(1.0, bar_area * count / largest)
                out.append(
                    f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" rx="2" '
                    f'fill="{_COLOURS[name]}"><title>{_LABELS[name]}: {count}</title></rect>'
                )
                x += w
        out.append(f'<text x="{x + 6:.1f}" y="{y + 16}" font-size="12">{sum(counts)}</text>')
    out.append("</svg>")
    return "".join(out)
