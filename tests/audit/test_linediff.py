"""linediff.unified_diff writes what difflib.unified_diff writes, byte for byte, on any two line lists.

Small alphabets make repeated lines (the cases where difflib could align a change elsewhere);
edits in one region (the fast path's shape), in several, and unrelated lists; sizes across
difflib's autojunk threshold (200 lines).
"""

from __future__ import annotations

import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.audit import linediff

LINES = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "  - x\n", "    y: 1\n"]), max_size=14)


def reference(before: list[str], after: list[str], n: int = 2) -> str:
    return "".join(difflib.unified_diff(before, after, "submitted", "after mutation", n=n))


@st.composite
def one_region(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """before = P + X + S, after = P + Y + S."""
    prefix, suffix = draw(LINES), draw(LINES)
    return prefix + draw(LINES) + suffix, prefix + draw(LINES) + suffix


@st.composite
def fresh_region(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """One region of lines the other side does not have (what a patch adds), around repeated lines."""
    prefix, suffix = draw(LINES), draw(LINES)
    added = draw(st.lists(st.sampled_from(["+ new\n", "+ other\n"]), max_size=4))
    removed = draw(st.lists(st.sampled_from(["- old\n", "- gone\n"]), max_size=3))
    return prefix + removed + suffix, prefix + added + suffix


@settings(max_examples=800, deadline=None)
@given(st.one_of(one_region(), fresh_region(), st.tuples(LINES, LINES)), st.integers(0, 3))
def test_same_bytes_as_difflib(pair: tuple[list[str], list[str]], n: int) -> None:
    before, after = pair
    assert linediff.unified_diff(before, after, "submitted", "after mutation", n) == reference(before, after, n)


@settings(max_examples=100, deadline=None)
@given(fresh_region(), st.integers(190, 210))
def test_same_bytes_as_difflib_around_autojunk(pair: tuple[list[str], list[str]], filler: int) -> None:
    before, after = pair
    before, after = ["x\n"] * filler + before, ["x\n"] * filler + after
    assert linediff.unified_diff(before, after, "submitted", "after mutation", 2) == reference(before, after)


def test_the_known_traps() -> None:
    cases = [
        (["x\n", "y\n", "z\n"], ["x\n", "q\n", "x\n", "y\n", "z\n"]),  # the insertion can slide: difflib's choice
        (["1\n", "2\n", "3\n", "4\n"], ["1\n", "2\n", "5\n", "1\n", "2\n", "3\n", "3\n", "4\n"]),  # a longer block
        (["x\n", "x\n", "x\n"], ["x\n", "B\n", "x\n", "x\n"]),  # S also starts inside P
        (["x\n", "B\n", "x\n", "x\n"], ["x\n", "x\n", "x\n"]),  # the same, removed
        (["a\n"], ["a\n"]),
        ([], ["a\n"]),
        (["a\n"], []),
    ]
    for before, after in cases:
        assert linediff.unified_diff(before, after, "s", "a", 2) == reference(before, after).replace(
            "--- submitted\n+++ after mutation\n", "--- s\n+++ a\n"
        )


def test_the_fast_path_is_taken_for_a_patch_in_one_place() -> None:
    before = ["spec:\n", "  containers:\n", "  - name: main\n"]
    after = [*before, "  tolerations:\n", "  - key: nvidia.com/gpu\n"]
    assert linediff._one_region(before, after, 2) == reference(before, after).split("\n", 2)[2]
