"""The unified diff of a patched object's YAML: difflib's bytes, without difflib's search where its answer is known.

A patch usually changes an object in one place (a toleration, a label, a priority class), so the
two YAML texts differ in one region: a common prefix P and suffix S around lines X (only in the
submitted text) and Y (only in the mutated one). difflib.SequenceMatcher (no junk; autojunk only
from 200 lines of `after` on) finds the longest matching block first (ties: the smallest index
in `before`, then in `after`), then recurses left and right of it. When no line of Y occurs in
`before` and no line of X in `after`, no matching block can contain a line of X or Y, so every
block lies within the P or S part of each side, and the first block difflib takes is P itself
(when |P| >= |S|: nothing is longer, and P has the smallest indices) or S (when |S| > |P|), after
which the rest is P or S alone. The one exception: when X is empty, `before` is P + S in one
piece, so a block the length of S could also start inside P (`before` repeating S earlier);
likewise in `after` when Y is empty; both are checked. So the matching blocks are P and S, and
the diff is one hunk: P's last `n` lines, X removed, Y added, S's first `n` lines. Anything else
is difflib's own work. tests/audit/test_linediff.py compares the two on generated line lists.
"""

from __future__ import annotations

import difflib

_AUTOJUNK = 200  # difflib treats popular lines of a `b` this long as junk: its answer then differs


def unified_diff(before: list[str], after: list[str], fromfile: str, tofile: str, n: int) -> str:
    """What `"".join(difflib.unified_diff(before, after, fromfile, tofile, n=n))` gives, for lines ending in a newline."""
    hunk = _one_region(before, after, n)
    if hunk is None:
        return "".join(difflib.unified_diff(before, after, fromfile, tofile, n=n))
    return f"--- {fromfile}\n+++ {tofile}\n{hunk}" if hunk else ""


def _one_region(a: list[str], b: list[str], n: int) -> str | None:
    """The one hunk difflib writes when a and b differ in one region it cannot align otherwise; ""
    when they are equal; None when difflib must decide."""
    size_a, size_b = len(a), len(b)
    if size_b >= _AUTOJUNK:
        return None
    shorter = min(size_a, size_b)
    p = 0
    while p < shorter and a[p] == b[p]:
        p += 1
    s = 0
    while s < shorter - p and a[size_a - 1 - s] == b[size_b - 1 - s]:
        s += 1
    x, y = a[p : size_a - s], b[p : size_b - s]
    if not x and not y:
        return ""
    if (y and not set(y).isdisjoint(a)) or (x and not set(x).isdisjoint(b)):
        return None
    if s > p and not (x and y):
        # one side is P + S in one piece: S must not also start inside its P
        whole = b if x else a
        tail = whole[p:]
        if any(whole[i] == tail[0] and whole[i : i + s] == tail for i in range(p)):
            return None
    start = max(0, p - n)
    a_end, b_end = min(size_a, size_a - s + n), min(size_b, size_b - s + n)
    lines = [f"@@ -{_range(start, a_end)} +{_range(start, b_end)} @@\n"]
    lines += [" " + line for line in a[start:p]]
    lines += ["-" + line for line in x]
    lines += ["+" + line for line in y]
    lines += [" " + line for line in a[size_a - s : a_end]]
    return "".join(lines)


def _range(start: int, stop: int) -> str:
    """A hunk's line range as difflib writes it (difflib._format_range_unified)."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start + 1 if length else start},{length}"
